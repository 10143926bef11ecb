// The OpenPAI rest-server's verdict on job YAML texts, for tests/conformance.
//
// Runs OpenPAI's own validation code (rest-server/@pai, unchanged from microsoft/pai; see
// rest-server/README.md) with the npm packages rest-server pins (package-lock.json here;
// .ci/run installs them with `npm ci`). test_conformance.py runs it as
//   NODE_PATH=tests/conformance/rest-server node tests/conformance/server_verdict.js
// (the @pai/... stubs stand in for what needs a running cluster; the hived checks that
// need no cluster state are in hivedChecks below).
//
// Reads JSON [text, ...] on stdin and prints JSON [{accept, stage, error}, ...].
// Stages follow the rest-server's order: bodyParser.text limit (100kb), middlewares/v2/protocol.js
// validate (js-yaml safeLoad + ajv schema + cross checks) and render, the hived schema and its
// cluster-independent checks (middlewares/v2/hived.js), then the parts of models/v2/job/k8s.js and
// runtime-env.js that read the job's shape before the framework is created.
const protocol = require('@pai/middlewares/v2/protocol');
const hivedSchema = require('@pai/config/v2/hived');
const runtimeEnv = require('@pai/runtime-env.js');
const yaml = require('js-yaml');

function hivedChecks(p) {
  if (!hivedSchema.validate(p)) throw new Error('hived: ' + JSON.stringify(hivedSchema.validate.errors));
  const h = p.extras && p.extras.hivedScheduler;
  if (h != null) {
    for (const role of Object.keys(h.taskRoles || {})) {
      if (!(role in p.taskRoles)) throw new Error(`Taskrole ${role} does not exist.`);
      const t = h.taskRoles[role];
      if (t.skuType != null && t.pinnedCellId != null) throw new Error(`Taskrole ${role} has both skuType and pinnedCellId`);
    }
  }
}

function k8sShape(config) {
  // models/v2/job/k8s.js put(): runtimeplugin loop; generateTaskRole(): ports, shm, completion
  if ('extras' in config && !config.extras.storages && 'com.microsoft.pai.runtimeplugin' in config.extras) {
    for (const plugin of config.extras['com.microsoft.pai.runtimeplugin']) {
      if (plugin.plugin === 'teamwise_storage') {
        if ('parameters' in plugin && plugin.parameters.storageConfigNames) {
          plugin.parameters.storageConfigNames.map((name) => ({ name }));
        }
      }
    }
  }
  runtimeEnv.generateFrameworkEnv('u~' + config.name, config, 'default');
  for (const taskRole of Object.keys(config.taskRoles)) {
    const ports = config.taskRoles[taskRole].resourcePerInstance.ports || {};
    for (const port of ['ssh', 'http']) { if (!(port in ports)) ports[port] = 1; }
    if ('extraContainerOptions' in config.taskRoles[taskRole]) {
      const s = config.taskRoles[taskRole].extraContainerOptions.shmMB || 512;
    }
    const completion = config.taskRoles[taskRole].completion;
    const x = completion && 'minFailedInstances' in completion;
  }
  JSON.stringify(config);
}

function verdict(text) {
  if (Buffer.byteLength(text, 'utf8') > 102400) return { accept: false, stage: 'body-limit', error: 'request entity too large' };
  let p;
  try { p = protocol.validate(text); } catch (e) { return { accept: false, stage: e.status ? 'protocol' : 'crash', error: String(e.message).slice(0, 300) }; }
  try { p = protocol.render(p); } catch (e) { return { accept: false, stage: 'render-crash', error: String(e.message).slice(0, 300) }; }
  try { hivedChecks(p); } catch (e) { return { accept: false, stage: 'hived', error: String(e.message).slice(0, 300) }; }
  try { k8sShape(p); } catch (e) { return { accept: false, stage: 'k8s-crash', error: String(e.message).slice(0, 300) }; }
  return { accept: true, stage: 'accepted', error: null };
}

function load(text) {
  try {
    const v = yaml.safeLoad(text);
    return { ok: true, json: JSON.stringify(v, (k, x) => (typeof x === 'number' && !isFinite(x)) ? String(x) : (x instanceof Date ? 'DATE' : x)) };
  } catch (e) { return { ok: false, error: String(e.message).split('\n')[0] }; }
}

const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const mode = process.argv[2] || 'verdict';
process.stdout.write(JSON.stringify(input.map(mode === 'load' ? load : verdict)));
