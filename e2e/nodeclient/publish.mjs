// The foreign client of jetbus's end-to-end tests. It publishes JSON events to in.<topic>
// through ingress with the nats npm package, as any non-Go service would, and writes one JSON
// line per event to stdout, which the Go test reads:
//
//   {"i":3,"id":"run-3","key":"run-k3","sent":1732312345678.123,"acked":…,"partition":1,"seq":42,"duplicate":false,"attempts":1}
//   … and "traceparent":"00-…-01" with --trace=true: each event sent with a W3C traceparent
//   of a trace of its own, as a client's tracer would set it
//   {"i":4,"id":"run-4","key":"run-k0","error":"…"}          given up at the deadline
//   {"bad":"run-bad-0"}                                     a refused fire-and-forget message was sent
//   {"done":true,"acked":99,"failed":0}
//
// Every event carries a Nats-Msg-Id, so a retry after a timeout or an "unavailable" answer is
// stored at most once. Events of one key are sent one after the other (each waits for its
// reply), so their order holds; keys run concurrently, paced to --rate events per second.
import { randomBytes } from "node:crypto";
import { connect, headers, StringCodec } from "nats";

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const [k, ...v] = a.replace(/^--/, "").split("=");
  return [k, v.join("=")];
}));
const servers = (args.servers ?? "nats://127.0.0.1:4222").split(",");
const topic = args.topic ?? "orders";
const count = Number(args.count ?? 100);
const keys = Math.max(1, Number(args.keys ?? 10));
const rate = Number(args.rate ?? 0); // events per second; 0: as fast as replies come
const prefix = args.prefix ?? "run";
const bad = Number(args.bad ?? 0);
const giveUpMs = Number(args.giveup ?? 120000);
const timeoutMs = Number(args.timeout ?? 5000);
const trace = args.trace === "true";

const sc = StringCodec();
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// --user and --pass: the NATS user it logs in as (deploy/nats/auth.conf's client: in.> only).
const auth = args.user ? { user: args.user, pass: args.pass ?? "" } : {};
const nc = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100, name: "jetbus-e2e-node", ...auth });
const start = now();
let acked = 0, failed = 0;

async function publishOne(i) {
  const key = `${prefix}-k${i % keys}`;
  const id = `${prefix}-${i}`;
  const body = sc.encode(JSON.stringify({ key, n: i, status: i % 3 === 0 ? "paid" : "open", total: i }));
  const h = headers();
  h.set("Nats-Msg-Id", id);
  h.set("x-key", key);
  // W3C Trace Context: version 00, a new trace ID, the client's span ID, sampled.
  const traceparent = trace ? `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01` : undefined;
  if (traceparent) h.set("traceparent", traceparent);
  const sent = now();
  let attempts = 0, last = "";
  for (let backoff = 50; now() - sent < giveUpMs; backoff = Math.min(backoff * 2, 1000)) {
    attempts++;
    try {
      const m = await nc.request(`in.${topic}`, body, { headers: h, timeout: timeoutMs });
      const r = JSON.parse(sc.decode(m.data));
      if (r.error) {
        last = `${r.error.code}: ${r.error.message}`;
        if (r.error.code !== "unavailable") break; // the client's fault: retrying cannot help
      } else {
        acked++;
        out({ i, id: r.id, key, sent, acked: now(), partition: r.partition, seq: r.seq, duplicate: r.duplicate, attempts, traceparent });
        return;
      }
    } catch (e) {
      last = String(e?.code ?? e?.message ?? e); // timeout, no responders, disconnected: retry
    }
    await sleep(backoff);
  }
  failed++;
  out({ i, id, key, error: last, attempts, traceparent });
}

// One worker per key: a key's events in order, keys concurrently, paced by the schedule.
const workers = [];
for (let w = 0; w < Math.min(keys, count); w++) {
  workers.push((async () => {
    for (let i = w; i < count; i += keys) {
      if (rate > 0) {
        const due = start + (i * 1000) / rate;
        if (due > now()) await sleep(due - now());
      }
      await publishOne(i);
    }
  })());
}
for (let j = 0; j < bad; j++) {
  const h = headers();
  h.set("Nats-Msg-Id", `${prefix}-bad-${j}`);
  nc.publish(`in.${topic}`, sc.encode(`not json ${j}`), { headers: h });
  out({ bad: `${prefix}-bad-${j}` });
}
await Promise.all(workers);
await nc.flush();
out({ done: true, acked, failed });
await nc.drain();
