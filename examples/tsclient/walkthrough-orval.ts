// The README's walk-through through the fetch client orval generates from
// the served OpenAPI document (orval.config.mjs), every answer parsed by
// the zod schemas orval generates beside it: an answer the document does
// not describe (a date-time with an offset, a missing member) throws. It
// makes the calls of walkthrough.ts, then reads the job list and each job,
// the answers that carry date-times.
//
//	node build/walkthrough-orval.js URL TOKEN
import { randomUUID } from "node:crypto";
import { jobGet, jobList, requestCreateAptTrade, requestGet } from "./orval/fetch.js";
import { JobGetResponse, JobListResponse, RequestCreateAptTradeResponse, RequestGetResponse } from "./orval/zod.js";

async function main(url: string, token: string): Promise<void> {
  // orval's functions fetch the document's relative paths: send them to
  // url with the token.
  const fetchRelative = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set("Authorization", `Bearer ${token}`);
    return fetchRelative(new URL(String(input), url), { ...init, headers });
  };
  const body = { params: { regions: ["11110", "11140"], from: "2025-01", to: "2025-02" } };

  // 1. Request a run with an Idempotency-Key; 2. the same call again.
  const key = randomUUID();
  const created = await requestCreateAptTrade(body, { headers: { "Idempotency-Key": key } });
  if (created.status !== 202) {
    throw new Error(`request refused: ${created.status} ${JSON.stringify(created.data)}`);
  }
  const accepted = RequestCreateAptTradeResponse.parse(created.data);
  const id = accepted.requestId;
  console.log(`requested: request ${id}, ${accepted.status}, ${accepted.estimatedCalls} external calls estimated`);
  const retried = await requestCreateAptTrade(body, { headers: { "Idempotency-Key": key } });
  const replayed = retried.headers.get("Idempotent-Replayed");
  if (retried.status !== 202 || RequestCreateAptTradeResponse.parse(retried.data).requestId !== id || replayed !== "true") {
    throw new Error(`retry: want request ${id} replayed, got ${retried.status} ${JSON.stringify(retried.data)}`);
  }
  console.log(`retried with the same Idempotency-Key: request ${id} again (Idempotent-Replayed: ${replayed})`);

  // 3. Another request while the first is active: 409 naming it.
  const again = await requestCreateAptTrade(body);
  if (again.status === 409) {
    console.log(`duplicate: 409 ${again.data.type}, activeRequestId ${again.data.activeRequestId ?? "?"} (${again.data.detail ?? ""})`);
  } else {
    console.log(`duplicate: ${again.status} (the first run had already ended)`);
  }

  // 4. Poll the request to its end.
  let status = "";
  const deadline = Date.now() + 60_000;
  for (;;) {
    const got = await requestGet(id);
    if (got.status !== 200) {
      throw new Error(`reading request ${id}: ${got.status} ${JSON.stringify(got.data)}`);
    }
    const r = RequestGetResponse.parse(got.data);
    if (r.status !== status) {
      status = r.status;
      const e = r.execution;
      const progress = e === null ? "no execution yet" : `execution ${e.id} ${e.status}, ${e.chunksDone}/${e.chunksTotal} chunks`;
      console.log(`request ${id}: ${status} (${progress})`);
    }
    if (status === "DONE" || status === "FAILED") {
      break;
    }
    if (Date.now() > deadline) {
      throw new Error(`request ${id} still ${status} after a minute`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  // 5. The job list and every job: their date-times (next, lastDueAt,
  // the last execution's) pass the generated schemas.
  const listed = await jobList();
  if (listed.status !== 200) {
    throw new Error(`job list: ${listed.status} ${JSON.stringify(listed.data)}`);
  }
  const jobs = JobListResponse.parse(listed.data).jobs ?? [];
  const nexts: string[] = [];
  for (const j of jobs) {
    const got = await jobGet(j.name);
    if (got.status !== 200) {
      throw new Error(`job ${j.name}: ${got.status} ${JSON.stringify(got.data)}`);
    }
    const detail = JobGetResponse.parse(got.data);
    if (detail.next !== null) {
      nexts.push(`${j.name} ${detail.next}`);
    }
  }
  console.log(`jobs: ${jobs.length} listed and read; next ${nexts.join(", ") || "none"}`);

  // 6. Bad params the schema cannot refuse (from after to): 400 with one
  // error per field.
  const refused = await requestCreateAptTrade({ params: { regions: ["11110"], from: "2025-05", to: "2025-02" } });
  if (refused.status !== 400 || !refused.data.errors) {
    throw new Error(`bad params: want a 400 with field errors, got ${refused.status}`);
  }
  console.log(`bad params: 400 ${refused.data.type}, ${refused.data.detail ?? ""}`);
  for (const e of refused.data.errors) {
    console.log(`  field ${e.location ?? "?"}: ${e.message ?? ""}`);
  }
  if (status !== "DONE") {
    throw new Error(`the run ended ${status}`);
  }
}

const [url, token] = process.argv.slice(2);
if (url === undefined || token === undefined) {
  console.error("usage: node build/walkthrough-orval.js URL TOKEN");
  process.exit(2);
}
main(url, token).catch((err: unknown) => {
  console.error("orval:", err instanceof Error ? err.message : err);
  process.exit(1);
});
