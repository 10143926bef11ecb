// Stub (paijob's): a cluster without the HiveD scheduler (its cluster-independent checks are in server_verdict.js).
module.exports = { enabledHived: false };
