// What OpenPAI's rest-server derives from a job for its tasks, for tests/conformance/test_task_env.py.
//
// Runs OpenPAI's own code (rest-server/@pai, unchanged from microsoft/pai; see rest-server/README.md):
// runtime-env.js generateFrameworkEnv, the PAI_* variables every task of a job gets, as models/v2/job/k8s.js
// writes them into the pod (`${value}`, with the virtual cluster put() picks), and models/v2/utils/name.js
// encodeName, the framework's object name (FC_FRAMEWORK_NAME).
//
// Reads JSON {jobs: [[frameworkName, jobYamlText], ...], names: [name, ...]} on stdin (the YAML read with
// js-yaml's safeLoad, as middlewares/v2/protocol.js does) and prints JSON {env: [{NAME: value}], names: [...]}.
const runtimeEnv = require('@pai/runtime-env.js');
const { encodeName } = require('@pai/models/v2/utils/name');
const yaml = require('js-yaml');

function frameworkEnv([frameworkName, text]) {
  const config = yaml.safeLoad(text);
  // models/v2/job/k8s.js put()
  const virtualCluster =
    'defaults' in config && config.defaults.virtualCluster != null ? config.defaults.virtualCluster : 'default';
  const env = runtimeEnv.generateFrameworkEnv(frameworkName, config, virtualCluster);
  // models/v2/job/k8s.js generateFrameworkDescription: frameworkEnvList
  return Object.fromEntries(Object.keys(env).map((name) => [name, `${env[name]}`]));
}

const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify({ env: input.jobs.map(frameworkEnv), names: input.names.map(encodeName) }));
