// The journey of one event: GET /v1/admin/events/{ref}/journey.
'use strict';

(() => {
  const o = outboxd;
  const { h } = o;
  const ref = new URLSearchParams(location.search).get('ref') || '';
  const loadError = document.getElementById('load-error');
  const box = document.getElementById('journey');

  // timeline lists every step with a time, oldest first.
  function timeline(j) {
    const ev = j.original;
    const steps = [[ev.createdAt, 'Ingested: the original and its outbox entry written in one store transaction']];
    for (const e of j.outbox) {
      if (e.dispatchedAt) steps.push([e.dispatchedAt, `Relayed by the dispatcher to ${e.stream} (outbox entry ${e.id})`]);
    }
    for (const e of j.stream.entries) {
      steps.push([e.at, `Stream entry ${e.id} added, origin ${e.origin || 'unknown'}: ${e.status.replace(/_/g, ' ')}`]);
    }
    for (const d of j.stream.deadLetters) {
      steps.push([d.at, `Dead-lettered as ${d.category} ${d.code} after ${d.deliveries} deliveries (dead letter ${d.id})`]);
    }
    if (ev.lastRequeuedAt) steps.push([ev.lastRequeuedAt, `Last requeued by the reconciler (${ev.requeueCount} requeues)`]);
    if (ev.syncFailure) steps.push([ev.syncFailure.at, `Parked: ${ev.syncFailure.category} ${ev.syncFailure.code}`]);
    if (j.readModel.row) steps.push([j.readModel.row.projectedAt, 'Projected into the read model (its row written)']);
    if (ev.syncedAt) steps.push([ev.syncedAt, 'Synced: syncedAt set on the original']);
    steps.sort((a, b) => new Date(a[0]) - new Date(b[0]));
    const ol = o.clear(document.getElementById('timeline'));
    for (const [at, what] of steps) ol.append(h('li', {}, o.timeEl(at, true), ' ', what));
  }

  function show(j) {
    const ev = j.original;
    timeline(j);
    o.fillPairs(document.getElementById('j-original'), [
      ['Found by', j.matchedBy === 'id' ? 'event id' : 'idempotency key'],
      ...o.originalPairs(ev, ev.state),
    ]);
    document.getElementById('j-payload').textContent = o.prettyJSON(ev.payload);

    o.clear(document.getElementById('j-outbox')).append(o.table('Outbox entries of the original',
      ['Entry', 'Stream', 'Written', 'Dispatched'],
      j.outbox.map((e) => [o.code(e.id), e.stream, o.timeEl(e.createdAt, true), e.dispatchedAt ? o.timeEl(e.dispatchedAt, true) : o.state('not_dispatched')]),
      'No outbox entry: dispatched entries are removed after the outbox retention (24 h by default).'));

    const s = j.stream;
    document.getElementById('j-scan').textContent = `Read the newest ${o.fmtNum(s.scanned)} entries of ${s.name} and `
      + `${o.fmtNum(s.dlqScanned)} of its dead-letter stream, down to the original's creation`
      + (s.partial ? `; the scan stopped at ${o.fmtNum(s.scanLimit)} entries, so older entries of this event may exist (partial).` : '.');
    o.clear(document.getElementById('j-stream')).append(o.table(`Entries of ${s.name} that name the original (group ${s.group})`,
      ['Entry', 'Added', 'Origin', 'Delivery', 'Delivered', 'Consumer'],
      s.entries.map((e) => [o.code(e.id), o.timeEl(e.at, true), e.origin || '–', o.state(e.status),
        e.deliveries ? `${o.fmtNum(e.deliveries)} times` + (e.failedDeliveries ? `, ${o.fmtNum(e.failedDeliveries)} failed` : '')
          : (e.status === 'acknowledged' ? 'at least once' : (e.status === 'waiting' ? 'not yet' : '–')),
        e.consumer ? `${e.consumer}, idle ${o.fmtAge(e.idleSeconds)}` : '–']),
      'No stream entry names it in the part read.'));
    o.clear(document.getElementById('j-dlq')).append(o.table('Dead letters that name the original',
      ['Dead letter', 'At', 'Category', 'Code', 'Deliveries'],
      s.deadLetters.map((d) => [h('a', { href: '/ui/dlq/' + encodeURIComponent(d.id) }, o.code(d.id)), o.timeEl(d.at, true),
        d.category, o.code(d.code), o.fmtNum(d.deliveries)]),
      'None.'));

    const row = j.readModel.row;
    const rowBox = o.clear(document.getElementById('j-row'));
    if (row) {
      const dl = h('dl', { class: 'pairs', id: 'j-row-pairs' });
      o.fillPairs(dl, [
        ['Event id', o.code(row.eventId)],
        ['Idempotency key', o.code(row.idempotencyKey)],
        ['Source / device', `${row.sourceKey} / ${row.deviceKey}`],
        ['Occurred', o.timeEl(row.occurredAt, true)],
        ['Ingested', o.timeEl(row.createdAt, true)],
        ['Projected', o.timeEl(row.projectedAt, true)],
      ]);
      rowBox.append(dl);
      if (row.eventId !== ev.id) rowBox.append(h('p', { class: 'warning', text: 'This row was projected from another original of the same idempotency key.' }));
    } else {
      rowBox.append(h('p', { text: 'No row: the event is not projected (yet).' }));
    }
    const st = j.readModel.stats;
    const statsBox = o.clear(document.getElementById('j-stats'));
    if (st) {
      const dl = h('dl', { class: 'pairs', id: 'j-stats-pairs' });
      o.fillPairs(dl, [
        ['Source / device', `${st.sourceKey} / ${st.deviceKey}`],
        ['Day (UTC)', st.day],
        ['Events counted', o.fmtNum(st.eventCount)],
        ['First occurred', o.timeEl(st.firstOccurredAt, true)],
        ['Last occurred', o.timeEl(st.lastOccurredAt, true)],
      ]);
      statsBox.append(dl);
    } else {
      statsBox.append(h('p', { text: 'No statistics row for its source, device and day.' }));
    }
    box.hidden = false;
  }

  async function load() {
    if (!ref) return;
    try {
      const j = await o.api('GET', `/v1/admin/events/${encodeURIComponent(ref)}/journey`);
      o.hideError(loadError);
      show(j);
    } catch (err) {
      box.hidden = true;
      o.showError(loadError, err.status === 404 ? `No original has the id or idempotency key “${ref}”.` : err);
    }
  }

  o.start(() => {
    o.refreshNav();
    load();
  });
})();
