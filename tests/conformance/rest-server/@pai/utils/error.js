// Stub (paijob's): rest-server's utils/error.js makes an http-errors error from (status, code, message).
module.exports = (status, code, message) => {
  const error = new Error(typeof message === 'object' ? (message.message || JSON.stringify(message)) : message);
  error.status = status;
  error.code = code;
  return error;
};
