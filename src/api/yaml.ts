/**
 * Writes the generated OpenAPI document as YAML (the served /openapi.yaml and
 * the checked-in openapi.yaml). Writing needs no YAML library: plain scalars
 * only where they cannot be read as anything but the string, `|-` blocks for
 * multi-line prose, and JSON-quoted strings (valid YAML) for everything else.
 */
const PLAIN = /^[A-Za-z_/][\w ./{}()`'*,+-]*$/;
const NOT_PLAIN = /^(?:true|false|null|yes|no|on|off|y|n|~)$/i;
const PLAIN_KEY = /^[A-Za-z_/][\w./{}-]*$/;

function scalar(s: string, indent: string): string {
  if (PLAIN.test(s) && !NOT_PLAIN.test(s) && !s.endsWith(' ') && !/: | #/.test(s)) return s;
  if (s.includes('\n') && !s.endsWith('\n') && !/^\s/.test(s) && !/[ \t]\n|[\r\t\u0000-\u0008\u000b-\u001f]|[ \t]$/.test(s)) {
    return `|-\n${s
      .split('\n')
      .map((line) => (line === '' ? '' : `${indent}${line}`))
      .join('\n')}`;
  }
  return JSON.stringify(s);
}

function key(k: string): string {
  return PLAIN_KEY.test(k) && !NOT_PLAIN.test(k) ? k : JSON.stringify(k);
}

function isBlock(v: unknown): boolean {
  return (Array.isArray(v) && v.length > 0) || (typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length > 0);
}

function node(v: unknown, indent: string): string {
  if (v === null) return 'null';
  if (typeof v === 'string') return scalar(v, indent);
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    return v.map((item) => `\n${indent}- ${node(item, `${indent}  `).replace(/^\n\s*/, '')}`).join('');
  }
  if (typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>).filter(([, x]) => x !== undefined);
    if (entries.length === 0) return '{}';
    return entries.map(([k, x]) => `\n${indent}${key(k)}:${isBlock(x) ? '' : ' '}${node(x, `${indent}  `)}`).join('');
  }
  throw new Error(`cannot write ${typeof v} as YAML`);
}

export function toYaml(value: unknown): string {
  return `${node(value, '').replace(/^\n/, '')}\n`;
}
