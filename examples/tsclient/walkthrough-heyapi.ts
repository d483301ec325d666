// The README's walk-through through the SDK hey-api (@hey-api/openapi-ts)
// generates from the served OpenAPI document with its zod plugin, default
// options, and the SDK's validator on (openapi-ts.config.mjs): every
// request and every answer is checked by the generated zod schemas, so an
// answer the document does not describe (a date-time with an offset, a
// missing member) throws. It makes the calls of walkthrough.ts, then reads
// the job list and each job, the answers that carry date-times.
//
//	node build/walkthrough-heyapi.js URL TOKEN
import { randomUUID } from "node:crypto";
import { client } from "./heyapi/client.gen.js";
import { jobGet, jobList, requestCreateAptTrade, requestGet } from "./heyapi/sdk.gen.js";
import type { ConflictError, ErrorModel } from "./heyapi/types.gen.js";

async function main(url: string, token: string): Promise<void> {
  client.setConfig({ baseUrl: url, headers: { Authorization: `Bearer ${token}` } });
  const body = { params: { regions: ["11110", "11140"], from: "2025-01", to: "2025-02" } };

  // 1. Request a run with an Idempotency-Key; 2. the same call again.
  const key = randomUUID();
  const created = await requestCreateAptTrade({ body, headers: { "Idempotency-Key": key } });
  if (created.data === undefined) {
    throw new Error(`request refused: ${created.response?.status} ${JSON.stringify(created.error)}`);
  }
  const id = created.data.requestId;
  console.log(`requested: request ${id}, ${created.data.status}, ${created.data.estimatedCalls} external calls estimated`);
  const retried = await requestCreateAptTrade({ body, headers: { "Idempotency-Key": key } });
  const replayed = retried.response?.headers.get("Idempotent-Replayed");
  if (retried.data?.requestId !== id || replayed !== "true") {
    throw new Error(`retry: want request ${id} replayed, got ${retried.response?.status} ${JSON.stringify(retried.error)}`);
  }
  console.log(`retried with the same Idempotency-Key: request ${retried.data.requestId} again (Idempotent-Replayed: ${replayed})`);

  // 3. Another request while the first is active: 409 naming it.
  const again = await requestCreateAptTrade({ body });
  if (again.response?.status === 409) {
    const conflict = again.error as ConflictError;
    console.log(`duplicate: 409 ${conflict.type}, activeRequestId ${conflict.activeRequestId ?? "?"} (${conflict.detail ?? ""})`);
  } else {
    console.log(`duplicate: ${again.response?.status} (the first run had already ended)`);
  }

  // 4. Poll the request to its end.
  let status = "";
  const deadline = Date.now() + 60_000;
  for (;;) {
    const got = await requestGet({ path: { id } });
    if (got.data === undefined) {
      throw new Error(`reading request ${id}: ${got.response?.status} ${JSON.stringify(got.error)}`);
    }
    const r = got.data;
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
  const jobs = await jobList();
  if (jobs.data === undefined) {
    throw new Error(`job list: ${jobs.response?.status} ${JSON.stringify(jobs.error)}`);
  }
  const nexts: string[] = [];
  for (const j of jobs.data.jobs ?? []) {
    const detail = await jobGet({ path: { job: j.name } });
    if (detail.data === undefined) {
      throw new Error(`job ${j.name}: ${detail.response?.status} ${JSON.stringify(detail.error)}`);
    }
    if (detail.data.next !== null) {
      nexts.push(`${j.name} ${detail.data.next}`);
    }
  }
  console.log(`jobs: ${jobs.data.jobs?.length ?? 0} listed and read; next ${nexts.join(", ") || "none"}`);

  // 6. Bad params the schema cannot refuse (from after to): 400 with
  // one error per field.
  const refused = await requestCreateAptTrade({ body: { params: { regions: ["11110"], from: "2025-05", to: "2025-02" } } });
  const problem = refused.error as ErrorModel | undefined;
  if (refused.response?.status !== 400 || problem === undefined || !problem.errors) {
    throw new Error(`bad params: want a 400 with field errors, got ${refused.response?.status}`);
  }
  console.log(`bad params: 400 ${problem.type}, ${problem.detail ?? ""}`);
  for (const e of problem.errors) {
    console.log(`  field ${e.location ?? "?"}: ${e.message ?? ""}`);
  }
  if (status !== "DONE") {
    throw new Error(`the run ended ${status}`);
  }
}

const [url, token] = process.argv.slice(2);
if (url === undefined || token === undefined) {
  console.error("usage: node build/walkthrough-heyapi.js URL TOKEN");
  process.exit(2);
}
main(url, token).catch((err: unknown) => {
  console.error("heyapi:", err instanceof Error ? err.message : err);
  process.exit(1);
});
