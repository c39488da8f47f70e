/**
 * What a machine allows, from CPU per request: bounds that say whether a goal
 * bench:verify missed could be met on this machine at the cost per verify it
 * measured, or needs cheaper verifies (or more cores).
 *
 * A closed loop of N requests in flight has a mean latency of N / throughput
 * (Little's law), and throughput is at most cores / CPU per request when every
 * core is busy. Both hold for any load; what follows from them is only as good
 * as the CPU per request measured in the same phase.
 */

/** The least mean latency (ms) of `inFlight` closed-loop requests that each cost `machineUsPerRequest` of `cores` cores. */
export function closedLoopMeanFloorMs(inFlight: number, machineUsPerRequest: number, cores: number): number {
  return (inFlight * machineUsPerRequest) / cores / 1000;
}

/** Mean of a list of latencies (ms). */
export function meanOf(latencies: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < latencies.length; i++) sum += latencies[i]!;
  return latencies.length === 0 ? Number.NaN : sum / latencies.length;
}

export interface TailFloor {
  /** The least mean latency the cores allow at this CPU per request (ms). */
  readonly meanFloorMs: number;
  /** The phase's own p99 / mean: its tail's shape. */
  readonly tailShape: number;
  /** The p99 at the mean floor if the tail keeps its shape (ms). */
  readonly p99FloorMs: number;
  /** The machine CPU per request (us) at which the p99 goal could be met with every core busy and the same shape. */
  readonly usPerRequestForGoal: number;
}

/**
 * The p99 a closed loop could reach on this machine at the measured CPU per
 * request, if its latencies kept the shape they had (p99 / mean): a model, not
 * a measurement, printed beside the goal it explains.
 */
export function closedLoopTailFloor(
  inFlight: number,
  machineUsPerRequest: number,
  cores: number,
  measured: { readonly meanMs: number; readonly p99Ms: number },
  p99GoalMs: number,
): TailFloor {
  const meanFloorMs = closedLoopMeanFloorMs(inFlight, machineUsPerRequest, cores);
  const tailShape = measured.p99Ms / measured.meanMs;
  return {
    meanFloorMs,
    tailShape,
    p99FloorMs: meanFloorMs * tailShape,
    usPerRequestForGoal: (p99GoalMs / tailShape / inFlight) * cores * 1000,
  };
}

/**
 * When the machine is the limit, two loads at the same concurrency run at rates
 * in the inverse ratio of their CPU per request: `fast / slow` is the throughput
 * ratio the slower can reach. Also the CPU per request the slower would need
 * for `goalRatio`.
 */
export function cpuBoundRatio(
  fastUsPerRequest: number,
  slowUsPerRequest: number,
  goalRatio: number,
): { ratio: number; slowUsForGoal: number } {
  return { ratio: fastUsPerRequest / slowUsPerRequest, slowUsForGoal: fastUsPerRequest / goalRatio };
}
