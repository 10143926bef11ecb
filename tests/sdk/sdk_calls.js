// Drives OpenPAI's official JavaScript SDK (@microsoft/openpai-js-sdk) against a cluster and prints what
// every call answered, as one JSON document on stdout: [{call, method, path, status, body}, ...].
// `path` is the swagger's path template of the call, `status` the HTTP status (the SDK returns only the
// body of a success: its documented status is recorded then). The Python side (test_openpai_js_sdk.py)
// asserts on the answers and checks each one against the swagger's schema.
//
// Environment: PAI_URL (http://127.0.0.1:<port>), PAI_TOKEN, PAI_USER.
'use strict';

const axios = require('axios');
const { PAIV2 } = require('@microsoft/openpai-js-sdk');

const url = process.env.PAI_URL;
const token = process.env.PAI_TOKEN;
const user = process.env.PAI_USER;
const records = [];

// as a user configures it: the cluster's address; the SDK adds /rest-server and /api/v2 itself
const client = new PAIV2.OpenPAIClient({ pai_uri: url, token, username: user });
const byPassword = new PAIV2.OpenPAIClient({ pai_uri: url, username: user, password: token });
const wrongToken = new PAIV2.OpenPAIClient({ pai_uri: url, token: 'not-the-token', username: user });

async function record(call, method, path, status, action) {
  try {
    const body = await action();
    records.push({ call, method, path, status, body: body === undefined ? null : body });
    return body;
  } catch (error) {
    if (error.status === undefined) {
      throw error;
    }
    records.push({ call, method, path, status: error.status, body: error.data, error: error.constructor.name });
    return undefined;
  }
}

function job(name, commands, extra = {}) {
  return {
    protocolVersion: 2,
    name,
    type: 'job',
    prerequisites: [{ type: 'dockerimage', name: 'img', uri: 'python:3.11' }],
    taskRoles: {
      Worker_A: {
        instances: 1,
        dockerImage: 'img',
        resourcePerInstance: { cpu: 1, memoryMB: 256, gpu: 0 },
        commands,
      },
    },
    ...extra,
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(name, states) {
  for (let i = 0; i < 400; i++) {
    const detail = await client.job.getJob(user, name);
    if (states.includes(detail.jobStatus.state)) {
      return detail;
    }
    await sleep(50);
  }
  throw new Error(`job ${name} did not reach ${states}`);
}

const JOB = '/api/v2/jobs/{user}~{job}';
const TASK = `${JOB}/attempts/{jobAttemptId}/taskRoles/{taskRoleName}/taskIndex/{taskIndex}/attempts`;
const LOGS = `${TASK}/{taskAttemptId}/logs`;

async function main() {
  await record('getClusterInfo', 'get', '/api/v2/info', 200, () => client.api.getClusterInfo());
  await record('basicLogin', 'post', '/api/v2/authn/basic/login', 200, () => client.authn.basicLogin(user, token));
  await record('basicLogin(unknown user)', 'post', '/api/v2/authn/basic/login', 400,
    () => client.authn.basicLogin('nobody-here', 'x'));
  await record('getUser', 'get', '/api/v2/users/{user}', 200, () => client.user.getUser(user));
  await record('listVirtualClusters', 'get', '/api/v2/virtual-clusters', 200,
    () => client.virtualCluster.listVirtualClusters());
  await record('getVirtualCluster', 'get', '/api/v2/virtual-clusters/{vc}', 200,
    () => client.virtualCluster.getVirtualCluster('default'));
  await record('getVirtualCluster(missing)', 'get', '/api/v2/virtual-clusters/{vc}', 404,
    () => client.virtualCluster.getVirtualCluster('nope'));
  await record('getStorages', 'get', '/api/v2/storages', 200, () => client.storage.getStorages());
  await record('getStorage', 'get', '/api/v2/storages/{storage}', 200, () => client.storage.getStorage('shared'));
  await record('getStorage(missing)', 'get', '/api/v2/storages/{storage}', 404,
    () => client.storage.getStorage('nope'));
  await record('getStorage(forbidden)', 'get', '/api/v2/storages/{storage}', 403,
    () => client.storage.getStorage('admin'));

  // a job that fails with its own error, one with a secret, one to stop
  const secret = job('sdk-secret', ['echo <% $secrets.word %> > /dev/null'], { secrets: { word: 'hunter2' } });
  await record('createJob', 'post', '/api/v2/jobs', 202,
    () => client.job.createJob(job('sdk-fail', ['echo to-stdout', 'echo to-stderr >&2', 'exit 3'])));
  await record('createJob(secret)', 'post', '/api/v2/jobs', 202, () => byPassword.job.createJob(secret));
  await record('createJob(duplicate)', 'post', '/api/v2/jobs', 409,
    () => client.job.createJob(job('sdk-fail', ['true'])));
  await record('createJob(long)', 'post', '/api/v2/jobs', 202,
    () => client.job.createJob(job('sdk-long', ['sleep 60'])));
  await waitFor('sdk-fail', ['FAILED']);
  await waitFor('sdk-secret', ['SUCCEEDED']);
  await waitFor('sdk-long', ['RUNNING']);
  await record('updateJobExecutionType(STOP)', 'put', `${JOB}/executionType`, 202,
    () => client.job.updateJobExecutionType(user, 'sdk-long', 'STOP'));
  await waitFor('sdk-long', ['STOPPED']);

  await record('listJobs', 'get', '/api/v2/jobs', 200, () => client.job.listJobs());
  await record('listJobs(keyword)', 'get', '/api/v2/jobs', 200, () => client.job.listJobs({ keyword: 'fail' }));
  await record('listJobs(withTotalCount)', 'get', '/api/v2/jobs', 200,
    () => client.job.listJobs({ withTotalCount: true, limit: 1, order: 'jobName,ASC' }));
  await record('listJobs(jobPriority)', 'get', '/api/v2/jobs', 200,
    () => client.job.listJobs({ jobPriority: 'high' }));
  await record('getJob', 'get', JOB, 200, () => client.job.getJob(user, 'sdk-fail'));
  await record('getJob(attempt)', 'get', `${JOB}/attempts/{jobAttemptId}`, 200,
    () => client.job.getJob(user, 'sdk-fail', 0));
  await record('getJob(stopped)', 'get', JOB, 200, () => client.job.getJob(user, 'sdk-long'));
  await record('getJob(missing)', 'get', JOB, 404, () => client.job.getJob(user, 'no-such-job'));
  await record('getJobConfig', null, null, 200, () => client.job.getJobConfig(user, 'sdk-secret'));
  await record('getTask', 'get', TASK, 200, () => client.job.getTask(user, 'sdk-fail', 0, 'workera', 0));
  const logs = await record('getTaskLogs', 'get', LOGS, 200,
    () => client.job.getTaskLogs(user, 'sdk-fail', 0, 'workera', 0, 0));
  for (const location of (logs && logs.locations) || []) {
    // what the portal's log viewer does with a location: fetch it as it is, no Authorization header
    const answer = await axios.get(location.uri, { responseType: 'text', validateStatus: () => true });
    records.push({ call: `log ${location.name}`, method: null, path: null, status: answer.status, body: answer.data });
  }
  await record('getTaskLogs(tailMode)', 'get', LOGS, 200,
    () => client.job.getTaskLogs(user, 'sdk-fail', 0, 'workera', 0, 0, true));
  await record('addTag', 'put', `${JOB}/tag`, 200, () => client.job.addTag(user, 'sdk-fail', 'sdk-tag'));
  await record('listJobs(tagsContain)', 'get', '/api/v2/jobs', 200,
    () => client.job.listJobs({ tagsContain: 'sdk-tag' }));
  await record('deleteTag', 'delete', `${JOB}/tag`, 200, () => client.job.deleteTag(user, 'sdk-fail', 'sdk-tag'));
  await record('deleteTag(missing)', 'delete', `${JOB}/tag`, 404,
    () => client.job.deleteTag(user, 'sdk-fail', 'sdk-tag'));
  await record('listEvents', 'get', `${JOB}/events`, 200, () => client.job.listEvents(user, 'sdk-fail'));

  // what the local cluster cannot do: the 404 of a missing route
  await record('getAllUser', null, null, 404, () => client.user.getAllUser());
  await record('getTokens', null, null, 404, () => client.token.getTokens());
  await record('basicLogout', null, null, 404, () => client.authn.basicLogout());
  await record('listJobs(wrong token)', 'get', '/api/v2/jobs', 401, () => wrongToken.job.listJobs());
  process.stdout.write(JSON.stringify(records));
}

main().catch((error) => {
  process.stderr.write(`sdk_calls.js: ${error.stack || error}\n`);
  process.exit(1);
});
