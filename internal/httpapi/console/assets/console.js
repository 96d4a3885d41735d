// outboxd console: what every page shares. The pages are rendered on the
// server without data; this script fetches the JSON of the API with the
// bearer token kept in this tab (sessionStorage) and the page's script
// fills the page in. Data only ever becomes text nodes, never HTML.
'use strict';

const outboxd = (() => {
  const TOKEN_KEY = 'outboxd.console.token';
  const body = document.body;
  const readOnly = body.dataset.readOnly === 'true';
  // mayAct turns false once the token in use may not act (the viewer
  // token); the server leaves the actions out of a read-only instance's
  // pages already.
  let mayAct = !readOnly;
  const authRequired = body.dataset.authRequired === 'true';
  const refreshSeconds = Number(body.dataset.refresh) || 5;

  // --- the token -----------------------------------------------------------

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch {
      return '';
    }
  }

  function setToken(value) {
    try {
      if (value) {
        sessionStorage.setItem(TOKEN_KEY, value);
      } else {
        sessionStorage.removeItem(TOKEN_KEY);
      }
    } catch {
      // Storage refused (a private mode): the token lives in no storage,
      // so it must be entered again after a navigation.
    }
    showTokenState();
  }

  const tokenForm = document.getElementById('token-form');
  const tokenInput = document.getElementById('token-input');
  const tokenError = document.getElementById('token-error');

  function showTokenState() {
    const has = token() !== '';
    document.getElementById('token-state').textContent = has
      ? 'Token set for this tab.'
      : (authRequired ? 'No token set: this instance needs one.' : 'No token needed.');
    document.getElementById('token-forget').hidden = !has;
  }

  function askToken(message) {
    tokenForm.hidden = false;
    tokenError.textContent = message || '';
    tokenInput.value = '';
    tokenInput.focus();
  }

  // The page's load function; called once a token is there, and again
  // after a new one was entered.
  let loader = null;

  tokenForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = tokenInput.value.trim();
    if (!v) {
      tokenError.textContent = 'Enter the token.';
      return;
    }
    setToken(v);
    tokenInput.value = '';
    tokenForm.hidden = true;
    document.getElementById('main').focus();
    if (loader) loader();
  });
  document.getElementById('token-set').addEventListener('click', () => askToken(''));
  document.getElementById('token-forget').addEventListener('click', () => {
    setToken('');
    if (authRequired) askToken('The token was forgotten. Enter it to go on.');
  });

  // --- the API ---------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, problem) {
      const p = problem || {};
      super(`${status} ${p.title || 'error'}${p.detail ? ': ' + p.detail : ''}`);
      this.status = status;
      this.problem = p;
    }
  }

  // api sends a request to the API with the token and returns the decoded
  // JSON of a 200; otherwise it throws an ApiError holding the problem.
  async function api(method, path, payload) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
    if (payload !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(payload);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, { title: 'Unreachable', detail: 'the instance did not answer (' + err.message + ')' });
    }
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    if (res.status === 401) {
      setToken('');
      askToken(t ? 'The token was refused: enter it again.' : 'This instance needs its bearer token.');
    }
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }

  // --- building the page -------------------------------------------------------

  // h returns a new element: attrs are set as attributes (class, href, …)
  // or, for "text", as its text; children are nodes or strings.
  function h(tag, attrs, ...children) {
    const isSVG = ['svg', 'polyline', 'line', 'circle', 'text', 'title', 'desc', 'g', 'rect'].includes(tag);
    const el = isSVG ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') {
        el.textContent = String(v);
      } else {
        el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function clear(el) {
    el.replaceChildren();
    return el;
  }

  // fillPairs fills a <dl> with [label, value] pairs (value: text or node).
  function fillPairs(dl, pairs) {
    clear(dl);
    for (const [label, value] of pairs) {
      dl.append(h('div', {}, h('dt', { text: label }), h('dd', {}, value === undefined || value === null || value === '' ? '–' : value)));
    }
  }

  // table returns a table with a caption, header cells and rows of cells
  // (text or nodes), in a scrolling box.
  function table(caption, heads, rows, empty) {
    const tbody = h('tbody');
    for (const r of rows) tbody.append(h('tr', {}, r.map((c, i) => (i === 0 ? h('th', { scope: 'row' }, c) : h('td', {}, c)))));
    if (rows.length === 0) tbody.append(h('tr', {}, h('td', { colspan: heads.length, class: 'empty', text: empty || 'None.' })));
    return h('div', { class: 'table-scroll' },
      h('table', {}, h('caption', { text: caption }), h('thead', {}, h('tr', {}, heads.map((x) => h('th', { scope: 'col', text: x })))), tbody));
  }

  // --- formats ------------------------------------------------------------------

  const num = new Intl.NumberFormat('en-US');
  function fmtNum(n) {
    return n === undefined || n === null ? '–' : num.format(n);
  }

  // counted writes a count with its noun: 1 original, 2 originals.
  function counted(n, noun) {
    return `${fmtNum(n)} ${noun}${n === 1 ? '' : 's'}`;
  }

  // fmtTime writes a time in UTC: 2026-11-01 09:00:00 UTC (with ms).
  function fmtTime(iso, ms) {
    if (!iso) return '–';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    const s = d.toISOString().replace('T', ' ');
    return (ms ? s.slice(0, 23) : s.slice(0, 19)) + ' UTC';
  }

  function timeEl(iso, ms) {
    return iso ? h('time', { datetime: iso, text: fmtTime(iso, ms) }) : '–';
  }

  function fmtAge(seconds) {
    if (seconds === undefined || seconds === null) return '–';
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  function fmtSeconds(v) {
    if (v === undefined || v === null) return '–';
    if (v < 1) return `${Math.round(v * 1000)} ms`;
    if (v < 60) return `${v.toFixed(1)} s`;
    return fmtAge(v);
  }

  // state returns a state as a word in a badge: the colour only adds to it.
  function state(word) {
    return h('span', { class: `state state-${String(word).replace(/[^a-z_-]/g, '')}`, text: String(word).replace(/_/g, ' ') });
  }

  function code(text) {
    return h('code', { text });
  }

  function journeyLink(eventId) {
    if (!eventId) return 'none';
    return h('a', { href: '/ui/journey?ref=' + encodeURIComponent(eventId) }, code(eventId));
  }

  // failure writes an original's syncFailure (none: 'none').
  function failure(f) {
    if (!f) return 'none';
    return h('span', {}, state('failed'), ` ${f.category} `, code(f.code), ` after ${fmtNum(f.deliveries)} deliveries, `,
      timeEl(f.at, true), f.message ? ` — ${f.message}` : '');
  }

  // originalPairs are the label and value pairs of an original (the
  // summary of the admin API, or the original with its payload), its
  // state given as stateWord. A field the answer lacks is left out.
  function originalPairs(ev, stateWord) {
    const pairs = [
      ['State', state(stateWord)],
      ['Event id', code(ev.id)],
      ['Idempotency key', code(ev.idempotencyKey)],
      ['Source / device', `${ev.sourceKey} / ${ev.deviceKey}`],
      ['Type', ev.type],
      ['Occurred', timeEl(ev.occurredAt, true)],
      ['Ingested', timeEl(ev.createdAt, true)],
      ['Synced', ev.syncedAt ? timeEl(ev.syncedAt, true) : 'not yet'],
      ['Requeues', fmtNum(ev.requeueCount)],
      ['Last requeued', ev.lastRequeuedAt ? timeEl(ev.lastRequeuedAt, true) : 'never'],
      ['Sync failure', failure(ev.syncFailure)],
    ];
    // The ingest client that sent it; none for the default client.
    if (ev.client) pairs.splice(3, 0, ['Client', ev.client]);
    return 'lastRequeuedAt' in ev ? pairs : pairs.filter(([label]) => label !== 'Last requeued');
  }

  function prettyJSON(text) {
    if (text === undefined || text === null) return '';
    try {
      return JSON.stringify(typeof text === 'string' ? JSON.parse(text) : text, null, 2);
    } catch {
      return String(text);
    }
  }

  // --- messages -----------------------------------------------------------------

  function showError(el, err) {
    el.hidden = false;
    el.textContent = err instanceof Error ? err.message : String(err);
  }

  function hideError(el) {
    el.hidden = true;
    el.textContent = '';
  }

  // announce writes a result into a status region and moves the focus
  // there, so a keyboard user whose button went away is not lost.
  function announce(el, text, isError) {
    el.textContent = text;
    el.classList.toggle('error', Boolean(isError));
    el.focus();
  }

  // fieldErrors marks the fields a 422 named (their input ids are
  // prefix + field) and returns whether any was marked.
  function fieldErrors(form, err, prefix) {
    for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
    for (const span of form.querySelectorAll('.field-error')) span.textContent = '';
    const errors = (err && err.problem && err.problem.errors) || [];
    let first = null;
    for (const e of errors) {
      const input = form.querySelector(`[name="${CSS.escape(e.field)}"]`);
      const span = document.getElementById(`${prefix}-${e.field === 'sourceKey' ? 'source' : e.field}-error`);
      if (input) {
        input.setAttribute('aria-invalid', 'true');
        first = first || input;
      }
      if (span) span.textContent = `${e.field} ${e.reason}`;
    }
    if (first) first.focus();
    return first !== null;
  }

  // --- confirmation -------------------------------------------------------------

  // confirm asks in the native modal dialog (focus kept inside, Escape
  // cancels) and resolves to true when the operator confirms.
  function confirm(title, text, okLabel) {
    const dialog = document.getElementById('confirm');
    if (!dialog) return Promise.resolve(false);
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-text').textContent = text;
    document.getElementById('confirm-ok').textContent = okLabel || 'Confirm';
    // The answer is taken from the button's submit (or Escape's cancel),
    // which happen at once, not from the close event, which comes later:
    // a close still queued from a first dialog would answer a second one.
    const form = dialog.querySelector('form');
    return new Promise((resolve) => {
      const done = (answer) => {
        form.removeEventListener('submit', onSubmit);
        dialog.removeEventListener('cancel', onCancel);
        resolve(answer);
      };
      const onSubmit = (ev) => done(Boolean(ev.submitter) && ev.submitter.value === 'ok');
      const onCancel = () => done(false);
      form.addEventListener('submit', onSubmit);
      dialog.addEventListener('cancel', onCancel);
      dialog.showModal();
    });
  }

  // --- the count of dead letters in the navigation --------------------------------

  function showDLQCount(n) {
    const el = document.getElementById('nav-dlq-count');
    if (el) el.textContent = n === undefined || n === null ? '' : `(${fmtNum(n)})`;
  }

  async function refreshNav() {
    try {
      const s = await api('GET', '/v1/status');
      showDLQCount(s.dlq ? s.dlq.length : null);
      return s;
    } catch {
      return null;
    }
  }

  // --- what the token may do --------------------------------------------------

  const scopeWords = {
    ingest: 'ingest token: it may only write events',
    viewer: 'viewer token: read-only',
    operator: 'operator token',
  };

  // applyScope asks the API what the token in use may do (GET
  // /v1/whoami), says it in the header, and takes the actions out of the
  // page when it may not act. It resolves to false when the token may not
  // read the pages (the ingest token), after asking for another.
  async function applyScope() {
    let who;
    try {
      who = await api('GET', '/v1/whoami');
    } catch (err) {
      return err.status !== 401;
    }
    const badge = document.getElementById('token-scope');
    if (badge) {
      badge.hidden = !who.authRequired;
      badge.textContent = scopeWords[who.scope] || who.scope;
    }
    if (!who.act && mayAct) {
      mayAct = false;
      for (const el of document.querySelectorAll('[data-operator]')) el.remove();
    } else if (who.act && !mayAct && !readOnly) {
      location.reload(); // a token that may act after one that could not: the actions come back with the page
      return false;
    }
    if (!who.read) {
      setToken('');
      askToken('This is the ingest token: it may only write events. Enter the viewer or the operator token.');
      return false;
    }
    return true;
  }

  // start runs the page's load once a token is there (or none is needed),
  // and again whenever a token is entered, after learning what the token
  // may do.
  function start(load) {
    loader = async () => {
      if (await applyScope()) load();
    };
    showTokenState();
    if (authRequired && !token()) {
      askToken('');
      return;
    }
    loader();
  }

  // canAct tells whether the page may offer actions: an instance that is
  // not read-only, and a token that may act.
  function canAct() {
    return mayAct;
  }

  return {
    readOnly, canAct, refreshSeconds, api, ApiError, h, clear, fillPairs, table, fmtNum, counted, fmtTime, timeEl, fmtAge,
    fmtSeconds, state, code, journeyLink, failure, originalPairs, prettyJSON, showError, hideError, announce, fieldErrors, confirm,
    showDLQCount, refreshNav, start,
  };
})();
