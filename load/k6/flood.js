// k6: real tenants' traffic through a flood of well-formed but unknown API keys (issue 17).
//
// Two open-loop scenarios at once (constant-arrival-rate: the flood does not slow down when the
// gateway does):
//   tenants  TENANT_RATE rps of real documents with real keys (the seed's files)
//   flood    FLOOD_RATE rps of `rsl_<random 12 hex>_<random 64 hex>`: every key id new, so each
//            one is a cache miss the key store must answer, none rate limited (no tenant yet)
// The question is the first one's goodput: 200 within the 3 s budget, per real request.
// Counters (in the --summary-export JSON): tenant_sent, tenant_ok (200 within 3 s),
// flood_sent, flood_status_<code>.
//
//   TENANT_RATE=100 FLOOD_RATE=1500 DURATION=90s DATA_DIR=.lab/data k6 run load/k6/flood.js
//
// Targets must be on loopback.

import http from 'k6/http';
import { SharedArray } from 'k6/data';
import { Counter } from 'k6/metrics';

const GATEWAY = __ENV.GATEWAY || 'http://127.0.0.1:8080';
const DATA_DIR = __ENV.DATA_DIR || '../../.lab/data';
const TENANT_RATE = parseInt(__ENV.TENANT_RATE || '100', 10);
const FLOOD_RATE = parseInt(__ENV.FLOOD_RATE || '1500', 10);
const DURATION = __ENV.DURATION || '90s';

if (!/^http:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(GATEWAY)) {
  throw new Error(`${GATEWAY}: load is only ever sent to loopback addresses`);
}

const keys = new SharedArray('keys', () => {
  const byTenant = {};
  for (const k of JSON.parse(open(`${DATA_DIR}/api-keys.json`))) byTenant[k.tenant_id] = k.api_key;
  return [byTenant];
});
const docs = new SharedArray('docs', () =>
  open(`${DATA_DIR}/corpus.jsonl`)
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l)),
);

const tenantSent = new Counter('tenant_sent');
const tenantOk = new Counter('tenant_ok');
const floodSent = new Counter('flood_sent');
const floodStatus = {};
for (const s of [0, 200, 401, 429, 503, 504]) floodStatus[s] = new Counter(`flood_status_${s}`);
const floodOther = new Counter('flood_status_other');

function arrival(rate, exec) {
  return {
    executor: 'constant-arrival-rate',
    exec,
    rate,
    timeUnit: '1s',
    duration: DURATION,
    // Each request may wait up to the 3 s budget (10 s client timeout): VUs for that, with room.
    preAllocatedVUs: Math.max(10, Math.ceil(rate * 0.5)),
    maxVUs: Math.max(50, rate * 4),
  };
}

export const options = {
  scenarios: {
    tenants: arrival(TENANT_RATE, 'tenant'),
    flood: arrival(FLOOD_RATE, 'flood'),
  },
  // No real thresholds: flood-check.sh compares the counters of runs. These always pass; they
  // only make k6 export each scenario's latency apart in the summary.
  thresholds: {
    'http_req_duration{name:tenant}': ['max>=0'],
    'http_req_duration{name:flood}': ['max>=0'],
  },
  summaryTrendStats: ['avg', 'p(50)', 'p(99)', 'max'],
};

const DOC = JSON.stringify({ doc_id: 'flood', text: 'Vega Labs paid Anna Schmidt.' });

export function tenant() {
  const doc = docs[Math.floor(Math.random() * docs.length)];
  const res = http.post(
    `${GATEWAY}/v1/extract`,
    JSON.stringify({ doc_id: doc.doc_id, text: doc.text, locale: doc.locale, doc_type: doc.doc_type }),
    {
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${keys[0][doc.tenant_id]}` },
      timeout: '10s',
      tags: { name: 'tenant' },
    },
  );
  tenantSent.add(1);
  if (res.status === 200 && res.timings.duration <= 3000) tenantOk.add(1);
}

function hex(n) {
  let s = '';
  for (let i = 0; i < n; i++) s += '0123456789abcdef'[Math.floor(Math.random() * 16)];
  return s;
}

export function flood() {
  const res = http.post(`${GATEWAY}/v1/extract`, DOC, {
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer rsl_${hex(12)}_${hex(64)}` },
    timeout: '10s',
    tags: { name: 'flood' },
  });
  floodSent.add(1);
  (floodStatus[res.status] || floodOther).add(1);
}
