// BullMQ worker: POST each job's payload to the sink over keep-alive HTTP/1.1; once N jobs
// have completed, write DONE_FILE and stay up until SIGTERM (the harness reads our CPU time
// from /proc first).
// usage: node worker.js REDIS_PORT SINK_URL CONCURRENCY N DONE_FILE
'use strict';
const fs = require('fs');
const http = require('http');
const { Worker } = require('bullmq');

const [port, sinkUrl, conc, n, doneFile] = process.argv.slice(2);
const concurrency = Number(conc);
const total = Number(n);
const url = new URL(sinkUrl);
// One socket per job running at once, kept alive: no connection churn.
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency });

function post(body) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      agent, host: url.hostname, port: url.port, path: url.pathname, method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode >= 200 && res.statusCode < 300
        ? resolve() : reject(new Error(`http ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

let completed = 0;
const worker = new Worker('hooks', async (job) => post(JSON.stringify(job.data)), {
  connection: { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null },
  concurrency,
});
worker.on('completed', () => {
  completed += 1;
  if (completed === total) fs.writeFileSync(doneFile, String(completed));
});
worker.on('failed', (job, err) => console.error(`job ${job && job.id} failed: ${err.message}`));
process.on('SIGTERM', async () => { await worker.close(true); process.exit(0); });
