/**
 * A local stand-in for a provider's HTTP API (the TypeScript twin of
 * tests/provider/recording.py): it records every JSON body posted to it and answers each
 * with the next queued reply, a JSON body or a recorded sequence of server-sent events. The
 * official SDKs are pointed at it with `baseURL`, so their SSE decoders and stream accumulators
 * do the reading.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export type Json = Record<string, unknown>;
export interface SseEvent {
  event?: string;
  data: Json | string;
}
export type Reply = { response: Json } | { stream: SseEvent[] };

export interface ProviderServer {
  baseUrl: string;
  requests: { path: string; body: Json }[];
  answer(...replies: Reply[]): void;
  close(): Promise<void>;
}

export function sseText(events: SseEvent[]): string {
  const lines: string[] = [];
  for (const event of events) {
    if (event.event !== undefined) {
      lines.push(`event: ${event.event}`);
    }
    lines.push(`data: ${typeof event.data === "string" ? event.data : JSON.stringify(event.data)}`);
    lines.push("");
  }
  return `${lines.join("\n")}\n`;
}

export async function startProviderServer(): Promise<ProviderServer> {
  const replies: Reply[] = [];
  const requests: { path: string; body: Json }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      requests.push({ path: req.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString()) as Json });
      const reply = replies.shift();
      if (reply === undefined) {
        res.writeHead(500).end("no reply queued");
        return;
      }
      const [payload, kind] =
        "stream" in reply
          ? [sseText(reply.stream), "text/event-stream"]
          : [JSON.stringify(reply.response), "application/json"];
      res.writeHead(200, { "content-type": kind, "content-length": Buffer.byteLength(payload) });
      res.end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    answer: (...queued) => void replies.push(...queued),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
