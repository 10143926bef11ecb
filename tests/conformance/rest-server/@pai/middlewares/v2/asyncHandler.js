// Stub (paijob's): only validate() and render() are called, never the express middleware.
module.exports = (fn) => fn;
