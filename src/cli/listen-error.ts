/**
 * One line for a server command that cannot listen, naming the address and what to do: a busy
 * port (`EADDRINUSE`), a privileged one (`EACCES`), an address not on this machine
 * (`EADDRNOTAVAIL`); anything else by its message.
 */
export function listenFailure(err: unknown, host: string, port: number): string {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  const at = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  switch (code) {
    case 'EADDRINUSE':
      return `cannot listen on ${at}: the port is already in use (stop what holds it, or pick another --port; --port 0 takes a free one)`;
    case 'EACCES':
      return `cannot listen on ${at}: permission denied (ports below 1024 need root; pick a --port above 1023)`;
    case 'EADDRNOTAVAIL':
      return `cannot listen on ${at}: ${host} is not an address of this machine (--host)`;
    default:
      return `cannot listen on ${at}: ${err instanceof Error ? err.message : String(err)}`;
  }
}
