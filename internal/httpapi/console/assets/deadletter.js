// One dead letter: GET /v1/admin/dlq/{id}, with its original; replay or
// drop it.
'use strict';

(() => {
  const o = outboxd;
  const { h } = o;
  const id = document.getElementById('dl-id').dataset.id;
  const loadError = document.getElementById('load-error');
  const result = document.getElementById('action-result');
  const bodyEl = document.getElementById('dl-body');
  const actions = document.getElementById('dl-actions');

  async function load() {
    let dl;
    try {
      dl = await o.api('GET', '/v1/admin/dlq/' + encodeURIComponent(id));
    } catch (err) {
      if (err.status === 404) {
        o.showError(loadError, 'This dead letter does not exist (any more): it was replayed or dropped.');
      } else {
        o.showError(loadError, err);
      }
      bodyEl.hidden = true;
      if (actions) actions.hidden = true;
      return;
    }
    o.hideError(loadError);
    bodyEl.hidden = false;
    if (actions) actions.hidden = false;
    o.fillPairs(document.getElementById('dl-failure'), [
      ['Category', dl.category],
      ['Code', dl.code ? o.code(dl.code) : ''],
      ['Reason', dl.reason],
      ['Error', dl.error],
      ['Deliveries', o.fmtNum(dl.deliveries)],
      ['Dead-lettered', h('span', {}, o.timeEl(dl.at), ` (${o.fmtAge(dl.ageSeconds)} ago)`)],
      ['Failed stream entry', dl.entryId ? o.code(dl.entryId) : ''],
      ['Stream and group', `${dl.stream || '–'} / ${dl.group || '–'}`],
      ['Consumer', dl.consumer],
    ]);
    const ev = dl.event;
    o.fillPairs(document.getElementById('dl-original'), ev
      ? o.originalPairs(ev, dl.original)
      : [['State', o.state(dl.original)], ['Event id', dl.eventId ? o.code(dl.eventId) : 'the message named none']]);
    const link = document.getElementById('dl-journey');
    link.hidden = !dl.eventId;
    link.href = '/ui/journey?ref=' + encodeURIComponent(dl.eventId || '');
    document.getElementById('dl-message').textContent = o.prettyJSON(dl.payload) || '(no payload field)';
    document.getElementById('dl-payload').textContent = ev ? o.prettyJSON(ev.payload) : '(no original)';
    const replay = document.getElementById('dl-replay');
    if (replay) replay.disabled = !ev;
  }

  async function act(path, verb) {
    try {
      const r = await o.api('POST', path, { ids: [id] });
      const outcome = r.results.length ? r.results[0].outcome : 'none';
      const words = {
        replayed: 'Replayed: the original was re-published with origin dlq-replay and this entry removed.',
        dropped: 'Dropped: the entry is gone; its original stays as it is.',
        original_missing: 'Kept: its original does not exist, so it cannot be replayed. Drop it.',
        not_found: 'This dead letter was gone already.',
        failed: `${verb} failed: try again.`,
      };
      o.announce(result, words[outcome] || outcome);
    } catch (err) {
      o.announce(result, err.message, true);
    }
    o.refreshNav();
    await load();
  }

  const replay = document.getElementById('dl-replay');
  if (replay) {
    replay.addEventListener('click', () => act('/v1/admin/dlq:replay', 'Replay'));
    document.getElementById('dl-drop').addEventListener('click', async () => {
      if (await o.confirm('Drop this dead letter?', `Entry ${id} is removed without a replay; its original stays as it is. `
        + 'This cannot be undone.', 'Drop')) {
        act('/v1/admin/dlq:drop', 'Drop');
      }
    });
  }

  o.start(() => {
    o.refreshNav();
    load();
  });
})();
