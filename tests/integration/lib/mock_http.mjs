// What the vendor mocks' HTTP servers share: listening on a loopback port, reading a
// request's body, answering JSON, closing with the connections a client kept open, and
// reading a JWT's parts.

/** Listens on a free loopback port; resolves once it does. */
export function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
}

/** The request's whole body, as a Buffer. */
export function readBody(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

/** Answers `obj` as JSON with a content-length. */
export function sendJson(res, status, obj, contentType = 'application/json') {
  const payload = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'content-type': contentType, 'content-length': payload.length });
  res.end(payload);
}

/** A function that closes `server`, cutting its kept-alive connections first. */
export function closer(server) {
  return () => new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
}

/** A JWT part (header or claims) decoded. */
export function b64urlJson(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}
