/**
 * Server URLs as messages show them. Kept apart from the client (and its zod): the CLI's offline
 * commands show saved contexts' servers and load no more than they need.
 */

/**
 * A server URL as a message may show it: without user information, since a password in it would
 * reach stderr and CI logs. Judged as the URL parser reads it (`http:user:pw@host` holds a password
 * too); text no parser reads that holds an `@` shows its scheme at most.
 */
export function urlWithoutUserInfo(raw: unknown): string {
  const text = String(raw);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return text.includes('@') ? `${/^[a-z][a-z0-9+.-]*:/i.exec(text)?.[0] ?? ''}… (not shown: it holds an @)` : text;
  }
  if (url.username || url.password) return `${url.protocol}//…@${url.host}${url.pathname === '/' ? '' : url.pathname}`;
  // An @ the parser read as no user information (http://user:12/pw@host, mailto:user:pw@host) may still be a password.
  return text.includes('@') ? `${url.protocol}${url.host === '' ? '' : `//${url.host}`}… (not shown: it holds an @)` : text;
}
