// Dead letters: GET /v1/admin/dlq with the page's filter, and the actions
// POST /v1/admin/dlq:replay and dlq:drop, one entry or every match.
'use strict';

(() => {
  const o = outboxd;
  const { h } = o;
  const params = new URLSearchParams(location.search);
  // The search form's fields, as GET /v1/admin/dlq names them. Only
  // category and code also select an --all action; with any other field
  // set, the bulk actions go by the ids of the matches instead.
  const fields = ['category', 'code', 'error', 'sourceKey', 'deviceKey', 'type', 'since', 'until', 'payload'];
  const words = {
    category: 'category', code: 'code', error: 'error containing', sourceKey: 'source', deviceKey: 'device', type: 'type',
    since: 'dead-lettered since', until: 'until', payload: 'payload field',
  };
  const filter = Object.fromEntries(fields.map((f) => [f, params.get(f) || '']));
  const byIDs = fields.some((f) => f !== 'category' && f !== 'code' && filter[f]);
  const after = params.get('after') || '';
  const summary = document.getElementById('dlq-summary');
  const loadError = document.getElementById('load-error');
  const result = document.getElementById('action-result');
  const tbody = document.querySelector('#dlq-table tbody');
  const more = document.getElementById('dlq-more');
  const pageSize = 100;

  function filterWords() {
    const parts = fields.filter((f) => filter[f]).map((f) => `${words[f]} ${filter[f]}`);
    return parts.length ? parts.join(', ') : 'no filter';
  }

  // filterQuery returns the filter's fields that are set, as a query.
  function filterQuery() {
    const q = new URLSearchParams();
    for (const f of fields) if (filter[f]) q.set(f, filter[f]);
    return q;
  }

  // describe sums up the answer of a replay or a drop.
  function describe(verb, r) {
    const parts = [`${verb} ${o.fmtNum(verb === 'Replayed' ? r.replayed : r.dropped)}`];
    if (r.originalMissing) parts.push(`kept ${o.fmtNum(r.originalMissing)} whose original is missing (drop them)`);
    if (r.notFound) parts.push(`${o.fmtNum(r.notFound)} gone already`);
    if (r.failed) parts.push(`${o.fmtNum(r.failed)} failed (try again)`);
    return parts.join('; ') + '.';
  }

  async function act(kind, payload) {
    const path = kind === 'replay' ? '/v1/admin/dlq:replay' : '/v1/admin/dlq:drop';
    return o.api('POST', path, payload);
  }

  // every runs an action over every match of the filter, one chunk per
  // request, and adds up the answers.
  async function every(kind) {
    const total = { replayed: 0, dropped: 0, originalMissing: 0, notFound: 0, failed: 0 };
    let cursor = '';
    for (let i = 0; i < 1000; i++) {
      let r;
      if (byIDs) {
        // A listing of the matches, then the action on their ids.
        const q = filterQuery();
        q.set('limit', '1000');
        if (cursor) q.set('after', cursor);
        const page = await o.api('GET', '/v1/admin/dlq?' + q);
        r = page.entries.length ? await act(kind, { ids: page.entries.map((dl) => dl.id) }) : { done: true };
        r.done = !page.next;
        r.next = page.next;
      } else {
        r = await act(kind, { all: true, category: filter.category || undefined, code: filter.code || undefined, after: cursor || undefined });
      }
      for (const k of Object.keys(total)) total[k] += r[k] || 0;
      result.textContent = `Working… ${describe(kind === 'replay' ? 'Replayed' : 'Dropped', total)}`;
      if (r.done || !r.next) break;
      cursor = r.next;
    }
    return total;
  }

  async function run(kind, payload, verb) {
    try {
      const r = payload ? await act(kind, payload) : await every(kind);
      o.announce(result, describe(verb, r));
    } catch (err) {
      o.announce(result, err.message, true);
    }
    await load();
  }

  function row(dl) {
    const cells = [
      h('a', { href: '/ui/dlq/' + encodeURIComponent(dl.id) }, o.code(dl.id)),
      o.journeyLink(dl.eventId),
      dl.category || '–',
      dl.code ? o.code(dl.code) : '–',
      o.fmtNum(dl.deliveries),
      o.fmtNum(dl.redrives || 0),
      o.fmtAge(dl.ageSeconds),
      o.state(dl.original),
    ];
    const tr = h('tr', {}, cells.map((c, i) => (i === 0 ? h('th', { scope: 'row' }, c) : h('td', {}, c))));
    if (o.canAct()) {
      const replay = h('button', { type: 'button', 'data-action': 'replay', 'aria-label': `Replay dead letter ${dl.id}`, text: 'Replay' });
      const drop = h('button', { type: 'button', 'data-action': 'drop', class: 'danger', 'aria-label': `Drop dead letter ${dl.id}`, text: 'Drop…' });
      replay.addEventListener('click', () => run('replay', { ids: [dl.id] }, 'Replayed'));
      drop.addEventListener('click', async () => {
        if (await o.confirm('Drop this dead letter?', `Entry ${dl.id} is removed from the dead-letter stream without a replay; `
          + 'its original stays as it is. This cannot be undone.', 'Drop')) {
          run('drop', { ids: [dl.id] }, 'Dropped');
        }
      });
      tr.append(h('td', { class: 'actions' }, replay, ' ', drop));
    }
    return tr;
  }

  async function load() {
    const q = filterQuery();
    q.set('limit', String(pageSize));
    if (after) q.set('after', after);
    let page;
    try {
      page = await o.api('GET', '/v1/admin/dlq?' + q);
    } catch (err) {
      o.showError(loadError, err);
      summary.textContent = '';
      return;
    }
    o.hideError(loadError);
    o.showDLQCount(page.length);
    const n = page.entries.length;
    summary.textContent = `${o.counted(page.length, 'dead letter')} in ${page.stream}. `
      + `${n ? o.fmtNum(n) : 'None'}${page.next ? ' (and more on the next page)' : ''} shown, ${filterWords()}`
      + (after ? ', after a previous page.' : '.');
    summary.dataset.length = String(page.length);
    o.clear(tbody);
    for (const dl of page.entries) tbody.append(row(dl));
    if (!n) {
      const cols = document.querySelectorAll('#dlq-table thead th').length;
      tbody.append(h('tr', {}, h('td', { colspan: cols, class: 'empty', text: 'No dead letter matches.' })));
    }
    for (const id of ['replay-all', 'drop-all']) {
      const b = document.getElementById(id);
      if (b) b.disabled = n === 0;
    }
    o.clear(more);
    if (page.next) {
      const nq = filterQuery();
      nq.set('after', page.next);
      more.append(h('a', { href: '/ui/dlq?' + nq, text: 'Next page' }));
    }
  }

  const replayAll = document.getElementById('replay-all');
  if (replayAll) {
    replayAll.addEventListener('click', async () => {
      if (await o.confirm('Replay every match?', `Every dead letter with ${filterWords()} is replayed: its original is re-published `
        + 'with origin dlq-replay and the entry removed once published. Fix the cause first, or they come back.', 'Replay')) {
        run('replay', null, 'Replayed');
      }
    });
    document.getElementById('drop-all').addEventListener('click', async () => {
      if (await o.confirm('Drop every match?', `Every dead letter with ${filterWords()} is removed without a replay `
        + `(${summary.dataset.length || 'all'} in the stream). Their originals stay parked. This cannot be undone.`, 'Drop them')) {
        run('drop', null, 'Dropped');
      }
    });
  }

  o.start(load);
})();
