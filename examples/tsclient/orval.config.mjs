// orval: the fetch client and, beside it, the zod schemas that
// walkthrough-orval.ts parses every answer with; default options.
export default {
  fetch: { input: "./openapi.json", output: { target: "./orval/fetch.ts", client: "fetch", mode: "single" } },
  zod: { input: "./openapi.json", output: { target: "./orval/zod.ts", client: "zod", mode: "single" } },
};
