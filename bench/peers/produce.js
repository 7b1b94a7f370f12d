// Pre-commit N copies of one JSON body as BullMQ jobs (addBulk, 100 per call), then exit.
// usage: node produce.js REDIS_PORT N BODY_FILE
'use strict';
const fs = require('fs');
const { Queue } = require('bullmq');

async function main() {
  const [port, n, bodyFile] = process.argv.slice(2);
  const total = Number(n);
  // The job data is the payload object; the worker sends JSON.stringify(data), the same bytes.
  const data = JSON.parse(fs.readFileSync(bodyFile, 'utf8'));
  const queue = new Queue('hooks', { connection: { host: '127.0.0.1', port: Number(port) } });
  // Like ankusa's defaults: retries with backoff, nothing kept once delivered.
  const opts = { attempts: 5, backoff: { type: 'exponential', delay: 1000 }, removeOnComplete: true };
  for (let i = 0; i < total; i += 100) {
    const jobs = [];
    for (let j = i; j < Math.min(total, i + 100); j++) jobs.push({ name: 'hook', data, opts });
    await queue.addBulk(jobs);
  }
  await queue.close();
}

main().catch((e) => { console.error(e); process.exit(1); });
