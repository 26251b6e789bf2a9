// The tahua console's script (served as /admin/console.js; see docs/console.md). A client
// of the admin API and nothing else: every change goes through /admin/v1/. Data is only
// ever put in the page as text (textContent, text nodes, attributes), never as markup.
'use strict';

const TOKEN_KEY = 'tahua.console-token'; // sessionStorage: this tab only, never a cookie or a URL
const LIMITS = [
  ['requests_per_minute', 'Requests / minute', 'int'], ['tokens_per_minute', 'Tokens / minute', 'int'],
  ['tokens_per_day', 'Tokens / day', 'int'], ['tokens_per_month', 'Tokens / month', 'int'],
  ['usd_per_day', 'USD / day', 'usd'], ['usd_per_month', 'USD / month', 'usd'],
  ['max_concurrent_requests', 'Concurrent requests', 'int'], ['max_concurrent_streams', 'Concurrent streams', 'int'],
];
const $ = (id) => document.getElementById(id);
const state = { token: null, full: false, tenant: null, view: 'tenants', tenants: [], selected: null, spend: null, cursors: [] };

// ---- the page's building blocks ------------------------------------------------------

/** An element with attributes and children; strings become text nodes (never markup). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'onclick') node.addEventListener('click', v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null) node.append(c instanceof Node ? c : String(c));
  return node;
}
const svg = (tag, attrs = {}) => {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
};
const fmtInt = (n) => Number(n ?? 0).toLocaleString('en-US');
const fmtUsd = (n) => '$' + Number(n ?? 0).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 8 });
const fmtNum = (n) => Number(n ?? 0).toLocaleString('en-US', { maximumFractionDigits: 2 });
const fmtMs = (n) => (n === undefined || n === null ? '\u2013' : `${fmtInt(Math.round(n))} ms`);
const limitsText = (l) => Object.entries(l ?? {}).map(([k, v]) => `${k}: ${k.startsWith('usd_') ? fmtUsd(v) : fmtInt(v)}`).join(', ') || 'none';
const listText = (a) => (a && a.length ? a.join(', ') : 'all');
const isoDay = (d) => d.toISOString().slice(0, 10);
function monthStart() { const d = new Date(); return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}-01`; }
function tomorrow() { const d = new Date(); d.setUTCDate(d.getUTCDate() + 1); return isoDay(d); }

function status(text, error = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', error);
}

/** One admin API call with the token; throws an Error with .status and .code on failure. */
async function api(method, path, body) {
  const headers = { authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store', credentials: 'omit' });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const err = new Error(`${res.status}: ${data?.error?.message ?? res.statusText ?? 'request failed'}`);
    err.status = res.status;
    err.code = data?.error?.code;
    throw err;
  }
  return data;
}

/** A confirmation in the page's own dialog: resolves true or false. */
function confirmAction(text) {
  const dialog = $('confirm');
  $('confirm-text').textContent = text;
  return new Promise((resolve) => {
    const done = (answer) => () => { dialog.close(); ok.removeEventListener('click', yes); cancel.removeEventListener('click', no); resolve(answer); };
    const ok = $('confirm-ok'), cancel = $('confirm-cancel');
    const yes = done(true), no = done(false);
    ok.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('cancel', no, { once: true });
    dialog.showModal();
    cancel.focus();
  });
}

// ---- sign in ---------------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  try {
    // Which token this is: a global one (its name) or a tenant's, which sees its tenant only.
    const me = await api('GET', '/admin/v1/whoami');
    const full = me.full === true;
    state.full = full;
    state.name = me.name;
    state.tenant = full ? null : me.tenant ?? null;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('signin').hidden = true;
    $('signin-error').textContent = '';
    $('nav').hidden = false;
    $('signout').hidden = false;
    $('who').textContent = full ? `Signed in: ${me.name} (gateway admin)` : `Signed in: ${me.name} (admin of tenant ${state.tenant})`;
    $('who').dataset.role = full ? 'admin' : 'tenant';
    for (const node of document.querySelectorAll('[data-full-only]')) node.hidden = !full;
    show(state.view);
  } catch (e) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $('signin-error').textContent = e.status === 401 ? `${e.message} (the token was not accepted)` : e.message;
  }
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  location.reload();
}

/** The new key's secret leaves the page once it was seen: dismissed, another tenant or another view. */
function forgetSecret() {
  $('secret-value').textContent = '';
  $('secret-box').hidden = true;
}

function show(view) {
  if ((view === 'models' || view === 'mcp') && !state.full) view = 'tenants';
  forgetSecret();
  state.view = view;
  for (const b of document.querySelectorAll('#nav button')) b.setAttribute('aria-current', b.dataset.view === view ? 'page' : 'false');
  for (const v of ['tenants', 'spend', 'requests', 'models', 'mcp', 'audit']) $(`view-${v}`).hidden = v !== view;
  ({ tenants: loadTenants, spend: loadSpend, requests: () => loadRequests(null), models: loadModels, mcp: loadMcp, audit: () => loadAudit(null) })[view]();
}

// ---- tenants and keys ------------------------------------------------------------------

function limitInputs(fieldset, prefix) {
  fieldset.replaceChildren(...LIMITS.map(([name, label, kind]) =>
    el('label', {}, `${label} (empty: none)`,
      el('input', { name: `limit.${name}`, type: 'number', min: 0, step: kind === 'usd' ? 'any' : 1, inputmode: kind === 'usd' ? 'decimal' : 'numeric', 'data-testid': `${prefix}-limit-${name}` }))));
}

/** The form's fields as an API body: models (a list), expires_at, limits (a removed limit is 0 when editing). */
function formBody(form, editing) {
  const body = {};
  const f = new FormData(form);
  if (f.has('name') && !editing) body.name = f.get('name').trim();
  const models = (f.get('models') ?? '').split(',').map((m) => m.trim()).filter(Boolean);
  if (models.length || editing) body.models = models;
  if (f.has('expires_at')) {
    const day = f.get('expires_at');
    if (day) body.expires_at = `${day}T00:00:00Z`;
    else if (editing) body.expires_at = null;
  }
  const limits = {};
  for (const [name, , kind] of LIMITS) {
    const raw = (f.get(`limit.${name}`) ?? '').trim();
    if (raw !== '') limits[name] = kind === 'usd' ? Number(raw) : Math.round(Number(raw));
    else if (editing) limits[name] = 0;
  }
  if (Object.keys(limits).length) body.limits = limits;
  return body;
}

function fillForm(form, record) {
  form.elements.name.value = record.name;
  form.elements.name.readOnly = true;
  form.elements.models.value = (record.models ?? []).join(', ');
  if (form.elements.expires_at) form.elements.expires_at.value = record.expires_at ? record.expires_at.slice(0, 10) : '';
  for (const [name] of LIMITS) form.elements[`limit.${name}`].value = record.limits?.[name] ?? '';
}

// A form's turn: each reset (an edit begun is one) starts a new one. The answer to a
// submit resets the form only in the turn it was sent in: an edit begun while the
// change was on its way is not cleared by the earlier answer.
const turns = new WeakMap();
const turnOf = (form) => turns.get(form) ?? 0;

function resetForm(form, title) {
  turns.set(form, turnOf(form) + 1);
  form.reset();
  form.elements.name.readOnly = false;
  delete form.dataset.editing;
  form.querySelector('h3').textContent = title;
  form.querySelector('[data-cancel]').hidden = true;
  form.querySelector('[data-error]').textContent = '';
}

function editIn(form, record, title) {
  resetForm(form, title);
  fillForm(form, record);
  form.dataset.editing = record.name;
  form.querySelector('h3').textContent = title;
  form.querySelector('[data-cancel]').hidden = false;
  form.elements.models.focus();
}

async function loadTenants() {
  status('Loading tenants\u2026');
  const from = monthStart(), to = tomorrow();
  $('tenants-range').textContent = `Spend: ${from} to ${to} (UTC, to exclusive), from the spend ledger. Quota use: now.`;
  try {
    const { tenants } = await api('GET', '/admin/v1/tenants');
    state.tenants = tenants;
    let spend = new Map(), spendNote = null;
    try {
      const usage = await api('GET', `/admin/v1/usage?from=${from}&to=${to}&group_by=tenant`);
      spend = new Map(usage.groups.map((g) => [g.tenant, g]));
    } catch (e) { spendNote = e.code === 'ledger_not_configured' ? 'no ledger' : 'unavailable'; }
    const details = await Promise.all(tenants.slice(0, 100).map((t) => api('GET', `/admin/v1/tenants/${encodeURIComponent(t.name)}`).catch(() => null)));
    $('tenants-body').replaceChildren(...tenants.map((t, i) => {
      const g = spend.get(t.name);
      const usage = details[i]?.usage ?? [];
      const quota = usage.length
        ? el('ul', { class: 'note' }, usage.map((u) => el('li', { 'data-testid': `quota-${t.name}-${u.limit}`, 'data-value': u.used, 'data-max': u.max },
          `${u.limit}: ${u.limit.startsWith('usd_') ? `${fmtUsd(u.used)} of ${fmtUsd(u.max)}` : `${fmtInt(u.used)} of ${fmtInt(u.max)}`}`)))
        : 'no limits';
      const actions = el('div', { class: 'row-actions' },
        el('button', { type: 'button', 'data-testid': `tenant-keys-${t.name}`, onclick: () => selectTenant(t.name) }, 'Keys'),
        state.full && t.source !== 'config'
          ? el('button', { type: 'button', 'data-testid': `tenant-edit-${t.name}`, onclick: () => editIn($('tenant-form'), t, `Edit tenant ${t.name}`) }, 'Edit')
          : null);
      return el('tr', { class: state.selected === t.name ? 'selected' : null, 'data-testid': `tenant-row-${t.name}` },
        el('th', { scope: 'row' }, t.name), el('td', {}, t.source), el('td', {}, listText(t.models)), el('td', {}, limitsText(t.limits)),
        el('td', { class: 'num', 'data-testid': `tenant-spend-${t.name}`, 'data-value': g ? g.cost_usd : 0 }, spendNote ?? fmtUsd(g?.cost_usd ?? 0)),
        el('td', {}, quota), el('td', {}, actions));
    }));
    if (!tenants.length) $('tenants-body').replaceChildren(el('tr', {}, el('td', { colspan: 7 }, 'No tenants yet.')));
    if (!state.full && state.tenant) state.selected = state.tenant;
    if (state.selected) await loadKeys();
    status(`Tenants as of ${new Date().toISOString().slice(0, 19)}Z.`);
  } catch (e) { status(`Could not load tenants: ${e.message}`, true); }
}

async function selectTenant(name) {
  state.selected = name;
  forgetSecret();
  for (const row of document.querySelectorAll('#tenants-body tr')) row.classList.toggle('selected', row.dataset.testid === `tenant-row-${name}`);
  resetForm($('key-form'), 'Issue a key');
  await loadKeys();
  $('h-keys').scrollIntoView({ block: 'nearest' });
}

async function loadKeys() {
  const tenant = state.selected;
  $('keys-panel').hidden = false;
  $('keys-tenant').textContent = tenant;
  try {
    const { keys } = await api('GET', `/admin/v1/keys?tenant=${encodeURIComponent(tenant)}`);
    const rows = keys.filter((k) => k.tenant === tenant).map((k) => {
      const editable = k.source !== 'config';
      return el('tr', { 'data-testid': `key-row-${k.name}` },
        el('th', { scope: 'row' }, k.name), el('td', {}, k.prefix ? `${k.prefix}\u2026` : ''), el('td', {}, listText(k.models)),
        el('td', {}, k.expires_at ?? 'never'), el('td', {}, limitsText(k.limits)),
        el('td', { 'data-testid': `key-metadata-${k.name}` }, Object.entries(k.metadata ?? {}).map(([n, v]) => `${n}=${v}`).join(', ')),
        el('td', {}, k.source),
        el('td', {}, editable ? el('div', { class: 'row-actions' },
          el('button', { type: 'button', 'data-testid': `key-edit-${k.name}`, onclick: () => editIn($('key-form'), k, `Edit key ${k.name}`) }, 'Edit'),
          el('button', { type: 'button', class: 'danger', 'data-testid': `key-revoke-${k.name}`, onclick: () => revokeKey(k.name) }, 'Revoke'))
          : 'in the config file'));
    });
    $('keys-body').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 8 }, 'No keys.'))]));
  } catch (e) { status(`Could not load keys: ${e.message}`, true); }
}

async function revokeKey(name) {
  if (!(await confirmAction(`Revoke key ${name}? Requests with it are refused (401) at once; this cannot be undone.`))) return;
  try {
    await api('DELETE', `/admin/v1/keys/${encodeURIComponent(name)}`);
    status(`Key ${name} revoked.`);
    await loadKeys();
  } catch (e) { status(`Could not revoke ${name}: ${e.message}`, true); }
}

async function submitTenant(ev) {
  ev.preventDefault();
  const form = ev.target, editing = form.dataset.editing, turn = turnOf(form);
  const error = form.querySelector('[data-error]');
  error.textContent = '';
  try {
    if (editing) await api('PATCH', `/admin/v1/tenants/${encodeURIComponent(editing)}`, formBody(form, true));
    else await api('POST', '/admin/v1/tenants', formBody(form, false));
    status(editing ? `Tenant ${editing} changed.` : 'Tenant created.');
    if (turnOf(form) === turn) resetForm(form, 'New tenant');
    await loadTenants();
  } catch (e) { error.textContent = e.message; }
}

async function submitKey(ev) {
  ev.preventDefault();
  const form = ev.target, editing = form.dataset.editing, turn = turnOf(form);
  const error = form.querySelector('[data-error]');
  error.textContent = '';
  try {
    if (editing) {
      await api('PATCH', `/admin/v1/keys/${encodeURIComponent(editing)}`, formBody(form, true));
      status(`Key ${editing} changed.`);
    } else {
      const created = await api('POST', '/admin/v1/keys', { ...formBody(form, false), tenant: state.selected });
      $('secret-name').textContent = created.name;
      $('secret-value').textContent = created.key;
      $('secret-box').hidden = false;
      $('secret-copy').focus();
      status(`Key ${created.name} issued: copy its secret now, it is not shown again.`);
    }
    if (turnOf(form) === turn) resetForm(form, 'Issue a key');
    await loadKeys();
  } catch (e) { error.textContent = e.message; }
}

async function copySecret() {
  const text = $('secret-value').textContent;
  try {
    await navigator.clipboard.writeText(text);
    status('Copied to the clipboard.');
  } catch {
    const range = document.createRange();
    range.selectNodeContents($('secret-value'));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    status('Selected: copy it with Ctrl+C (the clipboard was not available).');
  }
}

// ---- spend -------------------------------------------------------------------------------

async function loadSpend(ev) {
  ev?.preventDefault();
  const form = $('spend-form');
  if (!form.elements.from.value) form.elements.from.value = monthStart();
  if (!form.elements.to.value) form.elements.to.value = tomorrow();
  const from = form.elements.from.value, to = form.elements.to.value, by = form.elements.by.value;
  const label = by[0].toUpperCase() + by.slice(1);
  $('spend-by-label').textContent = by;
  $('spend-group-col').textContent = label;
  $('spend-day-group-col').textContent = label;
  $('spend-range').textContent = `${from} to ${to} (UTC, to exclusive); cost in USD as the ledger records it.`;
  status('Loading spend\u2026');
  $('spend-csv').disabled = true;
  try {
    const usage = await api('GET', `/admin/v1/usage?from=${from}&to=${to}&group_by=${by},day`);
    state.spend = { usage, by, from, to };
    renderSpend(usage, by);
    $('spend-csv').disabled = false;
    status(usage.truncated ? 'More than 10,000 groups: the answer stops there; narrow the range.' : `Spend as of ${new Date().toISOString().slice(0, 19)}Z.`);
  } catch (e) {
    status(e.code === 'ledger_not_configured' ? 'No spend ledger is configured on this gateway (usage.sinks: sqlite or postgres).' : `Could not load spend: ${e.message}`, true);
  }
}

function renderSpend(usage, by) {
  const groups = new Map(), days = new Map();
  let total = { requests: 0, input_tokens: 0, output_tokens: 0, cost_usd: 0 };
  for (const g of usage.groups) {
    const name = g[by] ?? '(none)';
    const s = groups.get(name) ?? { requests: 0, errors: 0, input_tokens: 0, output_tokens: 0, cost_usd: 0 };
    for (const k of Object.keys(s)) s[k] += Number(g[k] ?? 0);
    groups.set(name, s);
    days.set(g.day, (days.get(g.day) ?? 0) + Number(g.cost_usd ?? 0));
    for (const k of Object.keys(total)) total[k] += Number(g[k] ?? 0);
  }
  $('spend-totals').replaceChildren(
    el('div', {}, 'Cost', el('strong', { 'data-testid': 'spend-total-cost', 'data-value': total.cost_usd }, fmtUsd(total.cost_usd))),
    el('div', {}, 'Requests', el('strong', { 'data-testid': 'spend-total-requests', 'data-value': total.requests }, fmtInt(total.requests))),
    el('div', {}, 'Tokens in / out', el('strong', {}, `${fmtInt(total.input_tokens)} / ${fmtInt(total.output_tokens)}`)));
  $('spend-groups-body').replaceChildren(...[...groups].map(([name, s]) => el('tr', { 'data-testid': `spend-row-${name}` },
    el('th', { scope: 'row' }, name), el('td', { class: 'num' }, fmtInt(s.requests)), el('td', { class: 'num' }, fmtInt(s.errors)),
    el('td', { class: 'num' }, fmtInt(s.input_tokens)), el('td', { class: 'num' }, fmtInt(s.output_tokens)),
    el('td', { class: 'num', 'data-testid': `spend-cost-${name}`, 'data-value': s.cost_usd }, fmtUsd(s.cost_usd)))));
  if (!groups.size) $('spend-groups-body').replaceChildren(el('tr', {}, el('td', { colspan: 6 }, 'Nothing recorded in this range.')));
  $('spend-days-body').replaceChildren(...usage.groups.map((g) => el('tr', {},
    el('td', {}, g.day), el('td', {}, g[by] ?? '(none)'), el('td', { class: 'num' }, fmtInt(g.requests)),
    el('td', { class: 'num' }, fmtInt(g.input_tokens)), el('td', { class: 'num' }, fmtInt(g.output_tokens)), el('td', { class: 'num' }, fmtUsd(g.cost_usd)))));
  drawChart([...days].sort(([a], [b]) => a.localeCompare(b)));
}

/** Cost per day as bars: a plain SVG, each bar with its day and amount as a title. */
function drawChart(days) {
  const chart = $('spend-chart');
  const W = 800, H = 240, pad = 28, max = Math.max(...days.map(([, v]) => v), 0);
  const nodes = [chart.querySelector('title')];
  const band = days.length ? (W - 2 * pad) / days.length : 0;
  days.forEach(([day, v], i) => {
    const h = max > 0 ? (v / max) * (H - 2 * pad) : 0;
    const width = Math.max(Math.min(band * 0.8, 60), 1);
    const rect = svg('rect', { x: pad + i * band + (band - width) / 2, y: H - pad - h, width, height: h, 'data-day': day, 'data-value': v });
    const tip = svg('title');
    tip.textContent = `${day}: ${fmtUsd(v)}`;
    rect.append(tip);
    nodes.push(rect);
    if (days.length <= 16 || i % Math.ceil(days.length / 16) === 0) {
      const label = svg('text', { x: pad + i * band + band / 2, y: H - 8, 'text-anchor': 'middle' });
      label.textContent = day.slice(5);
      nodes.push(label);
    }
  });
  const top = svg('text', { x: 4, y: 14 });
  top.textContent = days.length ? `max ${fmtUsd(max)} per day` : 'no spend in this range';
  nodes.push(top);
  chart.replaceChildren(...nodes);
  chart.dataset.bars = String(days.length);
}

/** A CSV cell: quoted, and text a spreadsheet would run as a formula (=, +, -, @, tab, CR) made inert. */
function csvCell(v) {
  if (typeof v === 'number') return String(v);
  let s = String(v ?? '');
  if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return `"${s.replace(/"/g, '""')}"`;
}

/** The spend as CSV: the API's own where it answers Accept: text/csv, else built here from the JSON answer. */
async function downloadCsv() {
  const { usage, by, from, to } = state.spend;
  let text = null;
  try {
    const res = await fetch(`/admin/v1/usage?from=${from}&to=${to}&group_by=${by},day`,
      { headers: { authorization: `Bearer ${state.token}`, accept: 'text/csv' }, cache: 'no-store', credentials: 'omit' });
    if (res.ok && /^text\/csv/.test(res.headers.get('content-type') ?? '')) text = await res.text();
  } catch { text = null; }
  $('spend-csv').dataset.source = text === null ? 'page' : 'api';
  if (text === null) {
    const cols = ['day', by, 'requests', 'errors', 'input_tokens', 'output_tokens', 'cached_tokens', 'cost_usd'];
    text = [cols.map(csvCell).join(','), ...usage.groups.map((g) => cols.map((c) => csvCell(g[c])).join(','))].join('\r\n') + '\r\n';
  }
  const url = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
  const a = el('a', { href: url, download: `tahua-spend-${by}-${from}-${to}.csv` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---- requests ----------------------------------------------------------------------------

/** A datetime-local value (the page's times are UTC) as the API's UTC time: 2026-12-05T10:00:05.120Z. */
function utcTime(v) {
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(?::(\d\d)(?:\.(\d{1,3}))?)?$/.exec(v);
  return m ? `${m[1]}T${m[2]}:${m[3] ?? '00'}.${(m[4] ?? '').padEnd(3, '0')}Z` : v;
}

async function loadRequests(cursor, ev) {
  ev?.preventDefault();
  const form = $('requests-form');
  if (!form.elements.from.value) form.elements.from.value = `${isoDay(new Date())}T00:00`;
  // A tenant admin's log is its tenant's: the page asks for it (the API decides anyway).
  if (!state.full && state.tenant) {
    form.elements.tenant.value = state.tenant;
    form.elements.tenant.readOnly = true;
  }
  const q = new URLSearchParams();
  for (const name of ['from', 'to', 'tenant', 'key', 'model', 'status', 'end_reason', 'limit']) {
    const v = form.elements[name].value.trim();
    if (v) q.set(name, name === 'from' || name === 'to' ? utcTime(v) : v);
  }
  if (cursor) q.set('cursor', cursor);
  if (!cursor) state.cursors = [];
  closeRequest();
  status('Loading requests\u2026');
  try {
    const page = await api('GET', `/admin/v1/requests?${q}`);
    $('requests-unavailable').hidden = true;
    // The rows as `requests` (or `data`); the model asked for and the one that answered
    // as requested_model/model (or model/served_model); the cost as cost_usd (or cost).
    const rows = (page.requests ?? page.data ?? []).map((r) => {
      const asked = r.requested_model ?? r.model ?? '', served = r.requested_model !== undefined ? r.model : r.served_model;
      return el('tr', { 'data-testid': `request-row-${r.record_id}`, 'data-request-id': r.request_id, 'data-ts': r.ts },
      el('td', {}, r.ts), el('td', {}, r.tenant ?? ''), el('td', {}, r.key ?? ''), el('td', {}, served && served !== asked ? `${asked} \u2192 ${served}` : asked),
      el('td', { class: 'num' }, r.status), el('td', {}, r.end_reason ?? ''), el('td', { class: 'num' }, `${fmtInt(r.input_tokens)} / ${fmtInt(r.output_tokens)}`),
      el('td', { class: 'num' }, fmtUsd(r.cost_usd ?? r.cost)), el('td', { class: 'num' }, fmtMs(r.latency_ms)), el('td', { class: 'num' }, fmtMs(r.ttft_ms)),
      el('td', {}, r.cache ?? ''), el('td', {}, r.request_id ?? ''),
      el('td', {}, r.record_id ? el('button', { type: 'button', 'data-testid': `request-open-${r.record_id}`, 'aria-label': `Details of request ${r.request_id}`, onclick: () => openRequest(r.record_id) }, 'Details') : ''));
    });
    $('requests-body').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 13 }, 'No requests match.'))]));
    $('requests-body').dataset.rows = String(rows.length);
    if (cursor) state.cursors.push(cursor);
    state.next = page.next_cursor ?? null;
    $('requests-next').disabled = !state.next;
    $('requests-first').disabled = !cursor;
    status(`Requests as of ${new Date().toISOString().slice(0, 19)}Z.`);
  } catch (e) {
    $('requests-body').replaceChildren();
    delete $('requests-body').dataset.rows;
    $('requests-next').disabled = $('requests-first').disabled = true;
    const absent = e.status === 404 && e.code === 'unknown_url';
    if (absent || (e.status === 403 && !state.full)) {
      const note = $('requests-unavailable');
      note.textContent = absent ? 'The request log is not available on this gateway (it has no GET /admin/v1/requests yet). Spend has the totals.'
        : 'The request log is not available to a tenant admin token on this gateway. Spend has your tenant\'s totals.';
      note.hidden = false;
      status('');
    } else status(e.code === 'ledger_not_configured' ? 'No spend ledger is configured on this gateway.' : `Could not load requests: ${e.message}`, true);
  }
}

// What one request's details show, in order: [field, label, how].
const REQUEST_FIELDS = [
  ['record_id', 'Record id'], ['request_id', 'Request id'], ['trace_id', 'Trace id'], ['ts', 'Received (UTC)'], ['end_ts', 'Ended (UTC)'],
  ['gateway', 'Gateway'], ['tenant', 'Tenant'], ['key', 'Key'], ['api', 'API'], ['request', 'Request'], ['requested_model', 'Model asked'],
  ['model', 'Model served'], ['provider', 'Provider'], ['deployment', 'Deployment'], ['route', 'Route'], ['stream', 'Streamed'],
  ['status', 'Status'], ['end_reason', 'End reason'], ['error', 'Error'], ['attempts', 'Attempts', 'int'], ['fallback', 'Fallback'],
  ['tokens', 'Tokens in / out / cached / total'], ['cost_usd', 'Cost (USD)', 'usd'], ['latency_ms', 'Latency', 'ms'], ['ttft_ms', 'TTFT', 'ms'],
  ['cache', 'Cache'], ['cache_tokens_saved', 'Tokens saved by the cache', 'int'], ['prompt_template', 'Prompt template'],
  ['guardrails', 'Guardrail verdicts', 'list'], ['guardrails_unchecked', 'Guardrails unchecked', 'list'], ['quality', 'Answer quality'],
  ['mcp', 'MCP'],
];

async function openRequest(recordId) {
  status('Loading the request\u2026');
  try {
    const r = await api('GET', `/admin/v1/requests/${encodeURIComponent(recordId)}`);
    const derived = {
      request: r.method || r.path ? `${r.method ?? ''} ${r.path ?? ''}`.trim() : null,
      tokens: `${fmtInt(r.input_tokens)} / ${fmtInt(r.output_tokens)} / ${fmtInt(r.cached_tokens)} / ${fmtInt(r.total_tokens)}`,
      mcp: r.mcp_method ? [r.mcp_method, r.mcp_tool, r.mcp_outcome].filter(Boolean).join(' \u00b7 ') : null,
      stream: r.stream === undefined || r.stream === null ? null : r.stream ? 'yes' : 'no',
    };
    const items = REQUEST_FIELDS.flatMap(([field, label, how]) => {
      const v = field in derived ? derived[field] : r[field];
      let shown;
      if (v === undefined || v === null || v === '') shown = '\u2013';
      else if (how === 'int') shown = fmtInt(v);
      else if (how === 'usd') shown = fmtUsd(v);
      else if (how === 'ms') shown = fmtMs(v);
      else if (how === 'list') shown = el('ul', {}, String(v).split(',').map((x) => el('li', {}, x)));
      else shown = String(v);
      return [el('dt', {}, label), el('dd', { 'data-testid': `request-detail-${field}` }, shown)];
    });
    $('request-detail-id').textContent = r.request_id ?? recordId;
    $('request-detail-list').replaceChildren(...items);
    $('request-detail').dataset.recordId = recordId;
    $('request-detail').hidden = false;
    $('request-detail').focus();
    status(`Request ${r.request_id ?? recordId}.`);
  } catch (e) { status(`Could not load the request: ${e.message}`, true); }
}

function closeRequest() {
  $('request-detail').hidden = true;
  delete $('request-detail').dataset.recordId;
  $('request-detail-list').replaceChildren();
}

// ---- models and routes -------------------------------------------------------------------

async function loadModels() {
  status('Loading deployments\u2026');
  // Self-healing first: a deployment its rule ejected says so beside its live state.
  let healing = null, healingError = null;
  try { healing = await api('GET', '/admin/v1/healing'); } catch (e) { healingError = e; }
  const ejected = new Set((healing?.targets ?? []).filter((x) => x.active && x.deployment).map((x) => `${x.model}/${x.deployment}`));
  try {
    const { models, generation } = await api('GET', '/admin/v1/deployments');
    $('models-list').replaceChildren(...models.map((m) => {
      const canary = m.canary?.enabled
        ? el('p', {}, `Canary: version ${m.canary.version}, `, el('strong', { 'data-testid': `canary-${m.name}`, 'data-value': m.canary.percent }, `${m.canary.percent}% of new requests`), ' ',
          el('button', { type: 'button', 'data-testid': `canary-change-${m.name}`, onclick: () => changeCanary(m.name, m.canary.percent) }, 'Change\u2026'))
        : el('p', { class: 'note' }, 'No canary.');
      return el('div', { 'data-testid': `model-${m.name}` },
        el('h3', {}, `${m.name} `, el('span', { class: 'note' }, `(balancing: ${m.balancing})`)), canary,
        el('div', { class: 'table-wrap', tabindex: 0, role: 'region', 'aria-label': `Deployments of ${m.name}` }, el('table', {},
          el('thead', {}, el('tr', {}, ['Deployment', 'Provider', 'State', 'Breaker', 'In flight', 'Requests', 'Failures', 'Latency (EWMA)'].map((h, i) => el('th', { scope: 'col', class: i >= 4 ? 'num' : null }, h)))),
          el('tbody', {}, m.deployments.map((d) => el('tr', {},
            el('th', { scope: 'row' }, d.id), el('td', {}, d.provider ?? ''),
            el('td', {}, el('span', { class: `pill ${d.state === 'active' ? 'ok' : 'bad'}`, 'data-testid': `deployment-state-${m.name}-${d.id}` }, d.state),
              ejected.has(`${m.name}/${d.id}`) ? [' ', el('span', { class: 'pill bad', 'data-testid': `deployment-healing-${m.name}-${d.id}` }, 'ejected by self-healing')] : null),
            el('td', {}, d.breaker ? d.breaker.state : 'off'), el('td', { class: 'num' }, fmtInt(d.outstanding)),
            el('td', { class: 'num' }, fmtInt(d.requests)), el('td', { class: 'num' }, fmtInt(d.failures)), el('td', { class: 'num' }, fmtMs(d.latency_ewma_ms))))))));
    }));
    status(`Config generation ${generation}, as of ${new Date().toISOString().slice(0, 19)}Z.`);
  } catch (e) { status(`Could not load deployments: ${e.message}`, true); }
  renderHealing(healing, healingError);
}

/** The self-healing actions this replica took and undid, newest first (GET /admin/v1/healing). */
function renderHealing(healing, error) {
  const note = $('healing-note');
  if (!healing) {
    $('healing-body').replaceChildren();
    delete $('healing-body').dataset.rows;
    note.textContent = `Could not load the self-healing actions: ${error?.message ?? 'no answer'}`;
    return;
  }
  const active = healing.targets.filter((x) => x.active);
  note.textContent = healing.rules.length
    ? `${healing.rules.length} rule${healing.rules.length === 1 ? '' : 's'}, evaluated every ${fmtMs(healing.interval_ms)}; in force now: ${active.length
      ? active.map((x) => `${x.rule} on ${x.model}${x.deployment ? `/${x.deployment}` : ''}`).join(', ') : 'nothing'}. This replica's last ${healing.audit.length} actions (it keeps 256).`
    : 'No self-healing rules in the config (healing.rules).';
  const actionText = (a) => a.action === 'restore' ? `restore (undoes ${a.undoes ?? '?'})`
    : a.action === 'shift_to_fallback' && a.percent !== undefined ? `shift_to_fallback (${a.percent} %)`
      : a.action === 'scale' && a.replicas_to !== undefined ? `scale ${a.kubernetes_deployment ?? ''} ${a.replicas_from ?? '?'} \u2192 ${a.replicas_to}` : a.action;
  const rows = [...healing.audit].reverse().map((a, i) => el('tr', { 'data-testid': `healing-row-${i}`, 'data-action': a.action, 'data-model': a.model, 'data-deployment': a.deployment ?? '' },
    el('td', {}, a.ts ?? ''), el('td', {}, a.rule), el('td', {}, a.model), el('td', {}, a.deployment ?? '\u2013'),
    el('td', { class: a.action === 'restore' ? null : 'error' }, actionText(a)), el('td', {}, a.error ? `${a.reason} (failed: ${a.error})` : a.reason ?? ''),
    el('td', {}, `${a.metric}: ${fmtNum(a.value)} (threshold ${fmtNum(a.threshold)})`)));
  $('healing-body').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 7 }, 'No self-healing action yet.'))]));
  $('healing-body').dataset.rows = String(rows.length);
}

async function changeCanary(model, current) {
  const input = el('input', { type: 'number', min: 0, max: 100, step: 'any', value: current, id: 'canary-percent', 'data-testid': 'canary-percent' });
  const text = $('confirm-text');
  const dialogDone = confirmAction('');
  text.replaceChildren(el('label', {}, `New canary share for ${model} (0\u2013100 %, now ${current} %). It applies to new requests at once and holds until the next config load.`, el('br'), input));
  input.focus();
  if (!(await dialogDone)) return;
  try {
    await api('PUT', `/admin/v1/models/${encodeURIComponent(model)}/canary`, { percent: Number(input.value) });
    status(`Canary of ${model} set to ${Number(input.value)} %.`);
    await loadModels();
  } catch (e) { status(`Could not change the canary: ${e.message}`, true); }
}

// ---- MCP tool pins -----------------------------------------------------------------------

const pretty = (v) => JSON.stringify(v ?? null, null, 2);
const whenText = (secs) => (secs ? new Date(secs * 1000).toISOString().slice(0, 19) + 'Z' : '\u2013');

/** One JSON Patch operation as a line of text: "replace /description: \"new\"". */
function changeText(c) {
  return `${c.op} ${c.path}` + (c.op === 'remove' ? '' : `: ${JSON.stringify(c.value)}`);
}

async function loadMcp() {
  status('Loading MCP tool pins\u2026');
  try {
    const { tools } = await api('GET', '/admin/v1/mcp/tools');
    // Changed tools first: they wait for someone.
    const pins = [...tools].sort((a, b) => (b.pending ? 1 : 0) - (a.pending ? 1 : 0) || `${a.server}/${a.tool}`.localeCompare(`${b.server}/${b.tool}`));
    $('mcp-list').replaceChildren(...(pins.length ? pins.map((p) => {
      const id = `${p.server}/${p.tool}`;
      const approved = el('div', {}, el('h4', {}, `Approved (by ${p.approved_by ?? '\u2013'}, ${whenText(p.approved_at)})`),
        el('pre', { 'data-testid': `mcp-approved-${id}` }, pretty(p.definition)));
      const parts = [el('h3', {}, `${id} `, el('span', { class: `pill ${p.pending ? 'bad' : 'ok'}`, 'data-testid': `mcp-state-${id}` }, p.pending ? 'changed: waiting for approval' : 'pinned'))];
      if (p.pending) {
        const changes = p.pending.changes ?? [];
        parts.push(el('div', { class: 'side-by-side' }, approved,
          el('div', {}, el('h4', {}, `Offered now (seen ${whenText(p.pending.seen_at)})`), el('pre', { 'data-testid': `mcp-pending-${id}` }, pretty(p.pending.definition)))));
        parts.push(el('h4', {}, `What differs (${changes.length})`),
          el('pre', { class: 'changes', 'data-testid': `mcp-changes-${id}` }, changes.length ? changes.map(changeText).join('\n') : 'The fingerprints differ; the definitions compare equal.'));
      } else {
        parts.push(approved);
      }
      parts.push(el('div', { class: 'row-actions' },
        p.pending ? el('button', { type: 'button', class: 'primary', 'data-testid': `mcp-approve-${id}`, onclick: () => approveTool(p) }, 'Approve the new definition') : null,
        el('button', { type: 'button', class: 'danger', 'data-testid': `mcp-forget-${id}`, onclick: () => forgetTool(p) }, 'Forget the pin')));
      return el('div', { class: 'pin', 'data-testid': `mcp-pin-${id}` }, ...parts);
    }) : [el('p', { class: 'note' }, 'No MCP tool is pinned yet.')]));
    status(`MCP tool pins as of ${new Date().toISOString().slice(0, 19)}Z.`);
  } catch (e) { status(`Could not load MCP tool pins: ${e.message}`, true); }
}

const toolUrl = (p) => `/admin/v1/mcp/tools/${encodeURIComponent(p.server)}/${encodeURIComponent(p.tool)}`;

async function approveTool(p) {
  const n = p.pending?.changes?.length ?? 0;
  if (!(await confirmAction(`Approve the changed definition of ${p.server}/${p.tool} (${n} change${n === 1 ? '' : 's'})? Calls get the new definition from now on.`))) return;
  try {
    await api('POST', `${toolUrl(p)}/approve`);
    status(`Approved the new definition of ${p.server}/${p.tool}.`);
    await loadMcp();
  } catch (e) { status(`Could not approve ${p.server}/${p.tool}: ${e.message}`, true); }
}

async function forgetTool(p) {
  if (!(await confirmAction(`Forget the pin of ${p.server}/${p.tool}? The next definition its server offers is pinned as it is.`))) return;
  try {
    await api('DELETE', toolUrl(p));
    status(`Forgot the pin of ${p.server}/${p.tool}.`);
    await loadMcp();
  } catch (e) { status(`Could not forget ${p.server}/${p.tool}: ${e.message}`, true); }
}

// ---- audit log ---------------------------------------------------------------------------

async function loadAudit(cursor, ev) {
  ev?.preventDefault();
  const form = $('audit-form');
  const q = new URLSearchParams({ limit: form.elements.limit.value });
  const who = form.elements.who.value.trim();
  if (who) q.set('who', who);
  if (cursor) q.set('cursor', cursor);
  if (!cursor) state.auditPages = 0;
  status('Loading the audit log\u2026');
  try {
    const page = await api('GET', `/admin/v1/audit?${q}`);
    const rows = page.entries.map((e) => el('tr', { 'data-testid': `audit-row-${e.id}`, 'data-action': e.action, 'data-who': e.who },
      el('td', {}, e.time), el('td', { 'data-testid': 'audit-who-cell' }, e.who), el('td', {}, e.tenant ?? ''), el('td', {}, e.action),
      el('td', {}, e.target ?? ''), el('td', {}, e.detail ?? ''), el('td', {}, `${e.method ?? ''} ${e.path ?? ''}`),
      el('td', { class: 'num' }, el('span', { class: `pill ${e.status === 403 ? 'bad' : 'ok'}` }, e.status ?? ''))));
    $('audit-body').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 8 }, 'No entries.'))]));
    if (cursor) state.auditPages += 1;
    state.auditNext = page.next_cursor ?? null;
    $('audit-next').disabled = !state.auditNext;
    $('audit-first').disabled = !cursor;
    status(`Audit log as of ${new Date().toISOString().slice(0, 19)}Z${state.full ? '' : ` (tenant ${state.tenant}'s entries)`}.`);
  } catch (e) {
    $('audit-body').replaceChildren();
    status(`Could not load the audit log: ${e.message}`, true);
  }
}

// ---- wiring ------------------------------------------------------------------------------

limitInputs(document.querySelector('#tenant-form [data-limits]'), 'tenant');
limitInputs(document.querySelector('#key-form [data-limits]'), 'key');
$('signin').addEventListener('submit', (ev) => { ev.preventDefault(); const t = $('token').value.trim(); $('token').value = ''; if (t) signIn(t); });
$('signout').addEventListener('click', signOut);
for (const b of document.querySelectorAll('#nav button')) b.addEventListener('click', () => show(b.dataset.view));
$('tenant-form').addEventListener('submit', submitTenant);
$('key-form').addEventListener('submit', submitKey);
$('tenant-form').querySelector('[data-cancel]').addEventListener('click', () => resetForm($('tenant-form'), 'New tenant'));
$('key-form').querySelector('[data-cancel]').addEventListener('click', () => resetForm($('key-form'), 'Issue a key'));
$('secret-copy').addEventListener('click', copySecret);
$('secret-dismiss').addEventListener('click', forgetSecret);
$('spend-form').addEventListener('submit', loadSpend);
$('spend-csv').addEventListener('click', downloadCsv);
$('requests-form').addEventListener('submit', (ev) => loadRequests(null, ev));
$('requests-next').addEventListener('click', () => loadRequests(state.next));
$('requests-first').addEventListener('click', () => loadRequests(null));
$('request-detail-close').addEventListener('click', closeRequest);
$('audit-form').addEventListener('submit', (ev) => loadAudit(null, ev));
$('audit-next').addEventListener('click', () => loadAudit(state.auditNext));
$('audit-first').addEventListener('click', () => loadAudit(null));
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) signIn(saved);
else $('token').focus();
