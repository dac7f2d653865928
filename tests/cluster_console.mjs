// The browser half of tests/cluster_console.py: headless Chromium (Debian's) driven by
// playwright-core. Prints one line per check ("ok: ..."); at "idle: ..." it waits for a line on
// stdin (the Python side has started the load and cancelled waits-for-quota) before reading on. Exits 1 with
// "FAIL: ..." and a screenshot of the page on the first failed check.
// At "nodes: ..." it waits again (the Python side has started a busy job).
//   node cluster_console.mjs '{"url", "alpha", "beta", "admin", "chromium", "artifacts", "npm", "pendingReason",
//                              "node", "memoryTotalBytes", "gpu", "busyShare"}'
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';

const config = JSON.parse(process.argv[2]);
const require = createRequire(path.join(config.npm, 'node_modules') + '/');
const { chromium } = require('playwright-core');
const REFRESH_WAIT = 30000;  // ms: many console refreshes (one every 2 s) on a busy machine

const stdin = readline.createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();
let page = null;
const pageErrors = [];

class Failure extends Error {}

function ok(message) {
  console.log('ok: ' + message);
}

function check(cond, message) {
  if (!cond) throw new Failure(message);
}

async function shot(name) {
  await page.screenshot({ path: path.join(config.artifacts, name), fullPage: true });
}

// Waits until pred(page) (evaluated in the page) is truthy and returns it.
async function waitFor(what, fn, arg) {
  try {
    const handle = await page.waitForFunction(fn, arg, { timeout: REFRESH_WAIT, polling: 250 });
    return await handle.jsonValue();
  } catch (e) {
    throw new Failure(`${what}: ${e.message.split('\n')[0]}`);
  }
}

const chart = (selector) => page.$eval(selector, (svg) => ({ points: Number(svg.dataset.points || 0),
                                                          last: svg.dataset.last === '' ? null : Number(svg.dataset.last) }));

async function logIn(context, token) {
  page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(config.url + '/console/');
  await page.fill('#token', token);
  await page.click('#login button[type=submit]');
}

async function alpha(browser) {
  await logIn(await browser.newContext({ viewport: { width: 1200, height: 900 } }), config.alpha);
  await waitFor('alpha logged in', () => !document.getElementById('app').hidden);
  check((await page.textContent('#who')) === 'tenant alpha', 'the header names the tenant');
  await waitFor('alpha\'s jobs listed', () => document.querySelector('tr[data-job="train-loss"]') &&
                                                document.querySelector('tr[data-job="waits-for-quota"]'));
  const jobs = await page.$$eval('#jobs tbody tr', (rows) => rows.map((r) => r.dataset.namespace + '/' + r.dataset.job));
  check(jobs.every((j) => j.startsWith('alpha/')) && !jobs.includes('beta/beta-secret'),
        'alpha sees only alpha\'s jobs: ' + jobs.join(', '));
  ok('alpha sees its jobs and none of beta\'s: ' + jobs.join(', '));

  // The pending job's reason: plan()'s words, as the API reports them.
  const reason = await page.textContent('tr[data-job="waits-for-quota"] td.reason');
  const phase = await page.textContent('tr[data-job="waits-for-quota"] td.phase');
  check(phase === 'Pending' && reason.includes(config.pendingReason) && /quota/.test(reason),
        `the waiting job shows its reason (${phase}: ${reason})`);
  ok(`the waiting job shows: ${reason}`);
  await shot('console-jobs.png');

  // The training job's loss curve, read twice: more points the second time.
  await page.click('tr[data-job="train-loss"]');
  await waitFor('the loss chart drawn', () => Number(document.getElementById('loss-chart').dataset.points) >= 2);
  const first = await chart('#loss-chart');
  const grown = await waitFor('the loss curve growing',
                              (n) => Number(document.getElementById('loss-chart').dataset.points) > n + 1 &&
                                     Number(document.getElementById('loss-chart').dataset.points), first.points);
  const second = await chart('#loss-chart');
  const series = await page.$$eval('#loss-chart [data-series]', (ls) => [...new Set(ls.map((l) => l.dataset.series))]);
  check(series.includes('loss') && series.includes('val_loss'), 'train and validation curves: ' + series.join(', '));
  check(second.last > 0 && Number.isFinite(second.last), 'the latest loss is a number: ' + second.last);
  ok(`the loss curve grew from ${first.points} to ${grown} points (latest loss ${second.last}); series ${series.join(', ')}`);
  const events = await page.$$eval('#job-events tbody tr', (rows) => rows.map((r) => r.children[2].textContent));
  check(['Submitted', 'Admitted', 'Started'].every((r) => events.includes(r)), 'the job\'s events: ' + events.join(', '));
  ok('the job\'s events: ' + events.join(', '));
  await shot('console-loss-curve.png');

  // A diagnosis: the segfaulting job's row says Failed, and its events name Crashed and SIGSEGV.
  await page.click('tr[data-job="segfaults"]');
  const crashed = await waitFor('the Crashed diagnosis in the job\'s events', () =>
    [...document.querySelectorAll('#job-events tbody tr')].map((r) => [r.children[2].textContent, r.children[3].textContent])
      .find(([reason]) => reason === 'Crashed')?.[1]);
  check(/SIGSEGV/.test(crashed), 'the Crashed event names the signal: ' + crashed);
  const crashedPhase = await page.textContent('tr[data-job="segfaults"] td.phase');
  check(crashedPhase === 'Failed', 'the segfaulting job is Failed: ' + crashedPhase);
  ok('the segfaulting job: Failed, Crashed: ' + crashed.split('\n')[0]);
  await shot('console-crashed.png');

  // The deployment while idle: the charts have points, no request per second, no latency.
  const card = '.deployment[data-deployment="stories"]';
  await waitFor('the deployment\'s charts', (c) => Number(document.querySelector(`${c} svg[data-chart="qps"]`)?.dataset.points) >= 2, card);
  const idle = await chart(`${card} svg[data-chart="qps"]`);
  check(idle.last === 0, 'no requests while idle: ' + idle.last);
  const summary = await page.textContent(`${card} .summary`);
  check(summary.includes('Available') && summary.includes('v1'), 'the deployment summary: ' + summary);
  await shot('console-deployment-idle.png');
  console.log(`idle: ${idle.points} points, qps ${idle.last}; ${summary}`);
  await lines.next();  // the load has started and waits-for-quota is cancelled

  // The cancel arrives over the watch stream: its events in the recent activity, the row's phase.
  const activity = await waitFor('the cancel in the recent activity', () => [...document.querySelectorAll(
    '#activity tr[data-object="Job alpha/waits-for-quota"]')].map((r) => r.children[2].textContent).join(', '));
  const reasons = activity.split(', ');
  check(reasons.includes('CancelRequested') && new Set(reasons).size === reasons.length,
        'each event of the cancel once: ' + activity);
  await waitFor('the cancelled job\'s phase', () =>
    document.querySelector('tr[data-job="waits-for-quota"] td.phase')?.textContent === 'Cancelled');
  ok(`the cancel arrived over the watch stream (events ${activity}); the row says Cancelled`);

  const busy = await waitFor('QPS above 0 under load',
                             (c) => Number(document.querySelector(`${c} svg[data-chart="qps"]`).dataset.last) > 0 &&
                                    Number(document.querySelector(`${c} svg[data-chart="latency"]`).dataset.last) > 0 &&
                                    Number(document.querySelector(`${c} svg[data-chart="qps"]`).dataset.last), card);
  const later = await chart(`${card} svg[data-chart="qps"]`);
  const latency = await chart(`${card} svg[data-chart="latency"]`);
  check(later.points > idle.points, `the QPS chart moved on (${idle.points} -> ${later.points} points)`);
  check(latency.last > 0, 'a TTFT under load: ' + latency.last);
  const tokens = await chart(`${card} svg[data-chart="tokens"]`);
  check(tokens.points >= 2 && tokens.last > 0, `tokens per second under load: ${tokens.last}`);
  // A chart that moves: wait for one more point and check it is drawn too.
  const more = await waitFor('another QPS point', (a) => {
    const n = Number(document.querySelector(`${a[0]} svg[data-chart="qps"]`).dataset.points);
    return n > a[1] && n;
  }, [card, later.points]);
  ok(`under load: ${busy} requests/s, TTFT p50 ${latency.last} ms, ${tokens.last} tokens/s; the QPS chart ${idle.points} -> ${later.points} -> ${more} points`);
  await shot('console-deployment-load.png');
  await page.context().close();
}

async function beta(browser) {
  await logIn(await browser.newContext({ viewport: { width: 1200, height: 900 } }), config.beta);
  await waitFor('beta\'s jobs listed', () => document.querySelector('tr[data-job="beta-secret"]'));
  await waitFor('beta\'s first refresh done', () => Number(document.body.dataset.refreshed) >= 1);
  const jobs = await page.$$eval('#jobs tbody tr', (rows) => rows.map((r) => r.dataset.namespace + '/' + r.dataset.job));
  check(jobs.length === 1 && jobs[0] === 'beta/beta-secret', 'beta sees only its own job: ' + jobs.join(', '));
  const deployments = await page.$$eval('.deployment', (ds) => ds.length);
  check(deployments === 0, `beta sees none of alpha's deployments (${deployments})`);
  const models = await page.$$eval('#models tbody tr', (rows) => rows.length);
  check(models === 0, `beta sees none of alpha's models (${models})`);
  ok('beta sees its own job and none of alpha\'s jobs, deployments or models');
  // Alpha's job by its address: the API answers as for a missing one.
  await page.evaluate(() => { location.hash = '#job/alpha/train-loss'; });
  const refused = await waitFor('alpha\'s job refused to beta', () => {
    const s = document.getElementById('job-status');
    return !document.getElementById('job-detail').hidden && s.className === 'error' && s.textContent;
  });
  check(/not found/.test(refused), 'alpha\'s job is not found for beta: ' + refused);
  const points = await chart('#loss-chart');
  check(points.points === 0, 'no loss curve of alpha\'s job for beta');
  ok('alpha\'s job by its address, for beta: ' + refused);
  await shot('console-beta.png');
  await page.context().close();
}

async function admin(browser) {
  await logIn(await browser.newContext({ viewport: { width: 1200, height: 900 } }), config.admin);
  await waitFor('both tenants\' jobs for the admin', () => document.querySelector('tr[data-job="beta-secret"]') &&
                                                           document.querySelector('tr[data-job="train-loss"]'));
  check((await page.textContent('#who')) === 'admin ops', 'the header names the admin');
  const namespaces = await page.$$eval('#jobs tbody tr', (rows) => [...new Set(rows.map((r) => r.dataset.namespace))]);
  check(namespaces.includes('alpha') && namespaces.includes('beta'), 'the admin sees every namespace: ' + namespaces);
  await waitFor('the deployment for the admin', () => document.querySelector('.deployment[data-key="alpha/stories"]'));
  ok('the admin sees the jobs of ' + namespaces.join(' and ') + ' and alpha\'s deployment');
  await shot('console-admin.png');
  await nodeUsage();
  await page.context().close();
}

// The nodes table's measured figures (status.usage, sampled every second by the local executor):
// CPU utilisation, memory in use and the GPU cell, and a chart that gains points. Then a busy
// job (config.busyShare of the machine's CPUs spinning) runs and the CPU figure reaches that share.
async function nodeUsage() {
  const row = `#nodes tr[data-node="${config.node}"]`;
  const reading = () => page.$eval(row, (r) => ({
    cpu: r.querySelector('td.cpu-utilization')?.dataset.value, memory: r.querySelector('td.memory-used')?.dataset.value,
    gpu: r.querySelector('td.gpu-usage')?.textContent, points: Number(r.querySelector('svg.spark')?.dataset.points || 0),
    text: r.querySelector('td.cpu-utilization')?.textContent }));
  await waitFor('a measured CPU figure in the nodes table', (r) => {
    const v = document.querySelector(`${r} td.cpu-utilization`)?.dataset.value;
    return v !== undefined && v !== '';
  }, row);
  const before = await reading();
  const cpu0 = Number(before.cpu);
  check(cpu0 >= 0 && cpu0 <= 1, 'CPU utilisation is a fraction: ' + before.cpu);
  check(Number(before.memory) > 0 && Number(before.memory) < config.memoryTotalBytes,
        `memory in use ${before.memory} lies within the machine's ${config.memoryTotalBytes} bytes`);
  check(config.gpu ? /^GPU 0: /.test(before.gpu) : before.gpu === 'no GPU (nvidia-smi not found)',
        'the GPU cell: ' + before.gpu);
  // The figure is measured, not fixed: the chart gains points and the text follows the samples.
  const grown = await waitFor('the node chart gaining points', (a) => {
    const n = Number(document.querySelector(`${a[0]} svg.spark`).dataset.points);
    return n > a[1] && n;
  }, [row, before.points]);
  ok(`node ${config.node}: CPU ${before.text}, memory ${before.memory} bytes, ${before.gpu}; chart ${before.points} -> ${grown} points`);
  console.log(`nodes: CPU ${before.text}`);
  await lines.next();  // the busy job runs
  const busy = await waitFor(`CPU utilisation reaching ${config.busyShare} under the busy job`, (a) =>
    Number(document.querySelector(`${a[0]} td.cpu-utilization`).dataset.value) >= a[1] &&
    document.querySelector(`${a[0]} td.cpu-utilization`).textContent, [row, config.busyShare]);
  ok(`under the busy job: CPU ${busy} (before: ${before.text}; at least ${config.busyShare} expected)`);
  await shot('console-nodes-busy.png');
}

async function badToken(browser) {
  await logIn(await browser.newContext(), 'not-a-token');
  const message = await waitFor('an unknown token refused', () => document.getElementById('login-error').textContent);
  check(/unknown token/.test(message) && !(await page.isVisible('#app')), 'an unknown token is refused: ' + message);
  ok('an unknown token is refused: ' + message);
  await page.context().close();
}

const browser = await chromium.launch({ executablePath: config.chromium, args: ['--no-sandbox'] });
let failed = false;
try {
  await alpha(browser);
  await beta(browser);
  await admin(browser);
  await badToken(browser);
  check(pageErrors.length === 0, 'script errors in the page: ' + pageErrors.join('; '));
} catch (e) {
  failed = true;
  console.log('FAIL: ' + (e instanceof Failure ? e.message : e.stack));
  if (pageErrors.length) console.log('script errors in the page: ' + pageErrors.join('; '));
  if (page) await page.screenshot({ path: path.join(config.artifacts, 'failure.png'), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
  stdin.close();
}
process.exit(failed ? 1 : 0);
