// Validates each OpenAPI document named on the command line with
// @apidevtools/swagger-parser, the validator orval 7 and many other tools
// run first; exits 1 when one is refused.
//
//	node validate.mjs openapi.json openapi-3.0.json
import SwaggerParser from "@apidevtools/swagger-parser";

let failed = false;
for (const file of process.argv.slice(2)) {
  try {
    await SwaggerParser.validate(file);
    console.log(`${file}: valid`);
  } catch (err) {
    failed = true;
    console.log(`${file}: ${err instanceof Error ? err.message : err}`);
  }
}
process.exit(failed ? 1 : 0);
