/** `npm start`: the service on the embedded default (or DATABASE_URL). */
import { runService } from './server.js';

runService().catch((e) => {
  process.stderr.write(`Baton failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
