// SPDX-License-Identifier: LGPL-2.1-or-later
// An OTLP/HTTP logs receiver for test_otlp.py that decodes requests with the OpenTelemetry
// project's own code (@opentelemetry/otlp-transformer's generated protobufjs root, the
// official opentelemetry-proto definitions), as a collector would. Listens on 127.0.0.1 (an
// ephemeral port, printed as the first line of stdout), writes one JSON line per log record
// to OUT (with COUNT_ONLY set: none, only the counts at the end), and answers the first
// FAIL_FIRST requests with 503 and Retry-After: 1. With TLS_CERT and TLS_KEY it serves HTTPS
// (a client certificate signed by TLS_CA is then required); with REQUIRE_HEADER ("Name: value")
// a request without that header is refused with 401, as a collector's auth extension does. A
// request with Content-Encoding: gzip is inflated first (and counted).
"use strict";
const http = require("http");
const https = require("https");
const fs = require("fs");
const zlib = require("zlib");
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");

const Req = root.opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest;
const Resp = root.opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse;
const out = fs.openSync(process.env.OUT, "a");
let failFirst = parseInt(process.env.FAIL_FIRST || "0", 10);
const countOnly = !!process.env.COUNT_ONLY;
let requests = 0, refused = 0, records = 0, unauthorized = 0, gzipped = 0;
const [needName, needValue] = (process.env.REQUIRE_HEADER || "").split(/:\s*/, 2);

// AnyValue (as toObject gives it) → plain JSON value.
function plain(v) {
  if (v === undefined || v === null) return null;
  if ("stringValue" in v) return v.stringValue;
  if ("boolValue" in v) return v.boolValue;
  if ("intValue" in v) return Number(v.intValue);
  if ("doubleValue" in v) return v.doubleValue;
  if ("bytesValue" in v) return Buffer.from(v.bytesValue).toString("base64");
  if ("arrayValue" in v) return (v.arrayValue.values || []).map(plain);
  if ("kvlistValue" in v) return attrs(v.kvlistValue.values || []);
  return null;
}
function attrs(kvs) {
  const o = {};
  for (const kv of kvs || []) o[kv.key] = plain(kv.value);
  return o;
}

function handle(req, res) {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    requests++;
    const json = (req.headers["content-type"] || "").includes("json");
    if (req.url !== "/v1/logs" || req.method !== "POST") {
      res.writeHead(404);
      return res.end();
    }
    if (needName && req.headers[needName.toLowerCase()] !== needValue) {
      unauthorized++;
      res.writeHead(401);
      return res.end();
    }
    if (failFirst > 0) {
      failFirst--;
      refused++;
      res.writeHead(503, { "Retry-After": "1" });
      return res.end();
    }
    let msg;
    try {
      let body = Buffer.concat(chunks);
      // Content-Encoding: gzip (Compression=gzip), as a collector inflates it.
      if (req.headers["content-encoding"] === "gzip") {
        body = zlib.gunzipSync(body);
        gzipped++;
      }
      if (json) {
        // The proto3 JSON mapping (64-bit integers as decimal strings) into the message
        // and back through the binary encoding: what fromObject cannot map is lost there.
        const obj = JSON.parse(body.toString("utf8"));
        msg = Req.toObject(Req.decode(Req.encode(Req.fromObject(obj)).finish()), { longs: String, defaults: false });
      } else {
        msg = Req.toObject(Req.decode(body), { longs: String, defaults: false });
      }
    } catch (e) {
      fs.writeSync(out, JSON.stringify({ error: String(e) }) + "\n");
      res.writeHead(400);
      return res.end();
    }
    for (const rl of msg.resourceLogs || []) {
      for (const sl of rl.scopeLogs || []) records += (sl.logRecords || []).length;
      if (countOnly) continue;
      const resource = attrs((rl.resource || {}).attributes);
      for (const sl of rl.scopeLogs || [])
        for (const lr of sl.logRecords || [])
          fs.writeSync(out, JSON.stringify({
            resource, scope: (sl.scope || {}).name, time: lr.timeUnixNano, severity: lr.severityNumber,
            attributes: attrs(lr.attributes), body: plain(lr.body), json,
          }) + "\n");
    }
    if (json) {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end("{}");
    } else {
      res.writeHead(200, { "Content-Type": "application/x-protobuf" });
      res.end(Buffer.from(Resp.encode(Resp.create({})).finish()));
    }
  });
}
const server = process.env.TLS_CERT ?
  https.createServer({
    cert: fs.readFileSync(process.env.TLS_CERT), key: fs.readFileSync(process.env.TLS_KEY),
    ca: fs.readFileSync(process.env.TLS_CA), requestCert: true, rejectUnauthorized: true,
  }, handle) :
  http.createServer(handle);
server.listen(0, "127.0.0.1", function () {
  process.stdout.write(this.address().port + "\n");
});
process.on("SIGTERM", () => {
  fs.writeSync(out, JSON.stringify({ requests, refused, records, unauthorized, gzipped }) + "\n");
  process.exit(0);
});
