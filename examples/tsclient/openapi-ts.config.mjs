// hey-api (@hey-api/openapi-ts): the SDK with the fetch client and the zod
// plugin, default options, the SDK's validator on, so every request and
// answer of walkthrough-heyapi.ts is checked by the generated schemas.
export default {
  input: "openapi.json",
  output: "heyapi",
  plugins: ["@hey-api/client-fetch", "zod", { name: "@hey-api/sdk", validator: true }],
};
