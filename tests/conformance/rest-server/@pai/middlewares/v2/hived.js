// Stub (paijob's): HiveD's checks that need cluster state; unused with enabledHived false.
module.exports = { validate: async (protocol) => protocol };
