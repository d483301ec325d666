// The README's walk-through through a strict TypeScript client: types
// generated from the served OpenAPI document by openapi-typescript
// (schema.d.ts), calls made by openapi-fetch. It requests an aptTrade run
// with an Idempotency-Key and retries it with the same key (the same
// request, replayed; nothing starts twice), reads the 409 a second request
// gets while the first is active by its problem type, follows the run to
// its end, and reads the field errors of a 400.
//
//	node build/walkthrough.js URL TOKEN
//
// The token is an operator's (radar dev prints one). Exit status: 0 when
// the run ended DONE, 1 otherwise.
import createClient from "openapi-fetch";
import { randomUUID } from "node:crypto";
import type { components, paths } from "./schema.js";

type RequestStatus = components["schemas"]["RequestView"]["status"];

async function main(url: string, token: string): Promise<void> {
  const api = createClient<paths>({ baseUrl: url, headers: { Authorization: `Bearer ${token}` } });
  const body = { params: { regions: ["11110", "11140"], from: "2025-01", to: "2025-02" } };

  // 1. Request a run: 202 with its id (or 409 when the job is busy). A new
  // Idempotency-Key for this request makes it safe to send again.
  const key = randomUUID();
  const created = await api.POST("/v1/jobs/aptTrade/requests", { params: { header: { "Idempotency-Key": key } }, body });
  let id: string;
  if (created.data !== undefined) {
    id = created.data.requestId;
    console.log(`requested: request ${id}, ${created.data.status}, ${created.data.estimatedCalls} external calls estimated`);
  } else if (created.response.status === 409 && created.error?.type === "/problems/duplicate-active-request" && "activeRequestId" in created.error && created.error.activeRequestId !== undefined) {
    id = created.error.activeRequestId;
    console.log(`the job is busy: following its active request ${id}`);
  } else {
    throw new Error(`request refused: ${created.response.status} ${JSON.stringify(created.error)}`);
  }

  // 2. The same call with the same key, as after a lost answer: the same
  // request again, marked as replayed; no second run.
  const retried = await api.POST("/v1/jobs/aptTrade/requests", { params: { header: { "Idempotency-Key": key } }, body });
  const replayed = retried.response.headers.get("Idempotent-Replayed");
  if (retried.data !== undefined && replayed === "true") {
    console.log(`retried with the same Idempotency-Key: request ${retried.data.requestId} again (Idempotent-Replayed: ${replayed})`);
    if (retried.data.requestId !== id) {
      throw new Error(`retry: request ${retried.data.requestId}, want ${id}`);
    }
  } else if (created.data !== undefined) {
    throw new Error(`retry: want the first answer replayed, got ${retried.response.status} ${JSON.stringify(retried.error)}`);
  }

  // 3. Another request while the first is active: 409 whose type says why,
  // naming the active request.
  const again = await api.POST("/v1/jobs/aptTrade/requests", { body });
  const conflict = again.error;
  if (again.response.status === 409 && conflict !== undefined && conflict.type === "/problems/duplicate-active-request" && "activeRequestId" in conflict) {
    console.log(`duplicate: 409 ${conflict.type}, activeRequestId ${conflict.activeRequestId ?? "?"} (${conflict.detail ?? ""})`);
  } else {
    console.log(`duplicate: ${again.response.status} (the first run had already ended)`);
  }

  // 4. Poll the request to its end.
  let status: RequestStatus | undefined;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const got = await api.GET("/v1/requests/{id}", { params: { path: { id } } });
    if (got.data === undefined) {
      throw new Error(`reading request ${id}: ${got.response.status} ${JSON.stringify(got.error)}`);
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

  // 5. Bad params: 400 with one error per field.
  const refused = await api.POST("/v1/jobs/aptTrade/requests", { body: { params: { regions: ["1111"], from: "2025-13", to: "2025-01" } } });
  const problem = refused.error;
  if (refused.response.status !== 400 || problem === undefined || !problem.errors) {
    throw new Error(`bad params: want a 400 with field errors, got ${refused.response.status}`);
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
  console.error("usage: node build/walkthrough.js URL TOKEN");
  process.exit(2);
}
main(url, token).catch((err: unknown) => {
  console.error("tsclient:", err instanceof Error ? err.message : err);
  process.exit(1);
});
