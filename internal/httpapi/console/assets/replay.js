// Replay: POST /v1/admin/replay (a dry run counts the window before
// the replay may run) and POST /v1/admin/verify (check, then repair), each
// one chunk per request until done.
'use strict';

(() => {
  const o = outboxd;
  const { h } = o;

  // --- replay ------------------------------------------------------------------

  const rForm = document.getElementById('replay-form');
  const rResult = document.getElementById('replay-result');
  const rRun = document.getElementById('replay-run');
  let counted = null; // the window the last dry run counted, and its count

  function replayWindow() {
    const v = (name) => rForm.elements[name].value.trim();
    const w = { from: v('from'), to: v('to'), by: v('by'), state: v('state') };
    if (v('sourceKey')) w.sourceKey = v('sourceKey');
    if (v('deviceKey')) w.deviceKey = v('deviceKey');
    if (rForm.elements.rebuild && rForm.elements.rebuild.checked) w.rebuild = true;
    return w;
  }

  function forget() {
    counted = null;
    if (rRun) {
      rRun.disabled = true;
      rRun.textContent = 'Replay…';
    }
  }

  rForm.addEventListener('input', forget);
  rForm.addEventListener('change', forget);

  rForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    forget();
    const w = replayWindow();
    try {
      const r = await o.api('POST', '/v1/admin/replay', { ...w, rebuild: undefined, dryRun: true });
      o.fieldErrors(rForm, null, 'r');
      counted = { key: JSON.stringify(w), count: r.count };
      o.announce(rResult, `${o.counted(r.count, 'original')} in the window.` + (r.count && rRun ? ' Replay them with the button.' : ''));
      if (rRun && r.count > 0) {
        rRun.disabled = false;
        rRun.textContent = `Replay ${o.counted(r.count, 'original')}…`;
      }
    } catch (err) {
      if (!o.fieldErrors(rForm, err, 'r')) o.announce(rResult, err.message, true);
      else rResult.textContent = err.message;
    }
  });

  if (rRun) {
    rRun.addEventListener('click', async () => {
      const w = replayWindow();
      if (!counted || counted.key !== JSON.stringify(w)) {
        forget();
        o.announce(rResult, 'The window changed: count it again first.', true);
        return;
      }
      const how = w.rebuild ? ' Their rows and counts are removed from the read model first (rebuild).' : '';
      if (!(await o.confirm(`Replay ${o.counted(counted.count, 'original')}?`, `The originals of [${w.from}, ${w.to}) are re-published `
        + `with origin replay; parked ones are redriven.${how}`, 'Replay'))) {
        return;
      }
      rRun.disabled = true;
      const total = { published: 0, redriven: 0, removedRows: 0, chunks: 0 };
      try {
        let after;
        for (;;) {
          const r = await o.api('POST', '/v1/admin/replay', { ...w, after });
          total.published += r.published;
          total.redriven += r.redriven;
          total.removedRows += r.removedRows;
          total.chunks++;
          rResult.textContent = `Working… published ${o.fmtNum(total.published)} of ${o.fmtNum(counted.count)}.`;
          if (r.done || !r.next) break;
          after = r.next;
        }
        o.announce(rResult, `Done: published ${o.counted(total.published, 'original')} with origin replay in ${o.counted(total.chunks, 'chunk')}`
          + `; redrove ${o.fmtNum(total.redriven)} parked` + (w.rebuild ? `; removed ${o.fmtNum(total.removedRows)} rows` : '') + '.');
      } catch (err) {
        o.announce(rResult, `Stopped after ${o.fmtNum(total.published)} published: ${err.message}. Running it again is safe.`, true);
      }
      forget();
    });
  }

  // --- verify ------------------------------------------------------------------

  const vForm = document.getElementById('verify-form');
  const vResult = document.getElementById('verify-result');
  const vDrift = document.getElementById('verify-drift');
  const vRepair = document.getElementById('verify-repair');
  let checked = null; // the window the last check covered, and what it would repair

  function vWindow() {
    const w = {};
    for (const name of ['from', 'to']) {
      const v = vForm.elements[name].value.trim();
      if (v) w[name] = v;
    }
    return w;
  }

  // verify runs every chunk of a verify and returns the drift and the
  // counts of what was checked.
  async function verify(w, repair) {
    const out = { drift: [], checked: {}, republished: 0, statsRecomputed: 0 };
    let after;
    for (let i = 0; i < 100000; i++) {
      const r = await o.api('POST', '/v1/admin/verify', { ...w, repair: repair || undefined, after });
      out.drift.push(...r.drift);
      out.checked[r.phase] = (out.checked[r.phase] || 0) + r.checked;
      out.republished += r.republished;
      out.statsRecomputed += r.statsRecomputed;
      vResult.textContent = `Working… ${r.phase}: ${o.fmtNum(out.checked[r.phase])} checked, ${o.fmtNum(out.drift.length)} drifts so far.`;
      if (r.done || !r.next) break;
      after = r.next;
    }
    return out;
  }

  function showDrift(out) {
    const rows = out.drift.map((d) => [o.state(d.kind), d.eventId ? o.journeyLink(d.eventId) : '–', `${d.sourceKey} / ${d.deviceKey}`,
      d.occurredAt ? o.timeEl(d.occurredAt) : (d.day || '–'),
      d.kind === 'stats_mismatch' ? `counted ${o.fmtNum(d.counted)}, rows ${o.fmtNum(d.rows)}` : '–',
      d.repaired ? 'yes' : 'no']);
    o.clear(vDrift).append(o.table('Drift between the originals and the read model',
      ['Kind', 'Event', 'Source / device', 'Occurred or day', 'Counts', 'Repaired'], rows, 'No drift.'));
  }

  function words(out) {
    const c = out.checked;
    const kinds = {};
    for (const d of out.drift) kinds[d.kind] = (kinds[d.kind] || 0) + 1;
    const drift = out.drift.length
      ? `drift ${o.fmtNum(out.drift.length)}: ` + Object.entries(kinds).map(([k, n]) => `${k.replace(/_/g, ' ')} ${n}`).join(', ')
      : 'no drift';
    return `Checked ${o.fmtNum(c.originals || 0)} synced originals and ${o.fmtNum(c.rows || 0)} rows: ${drift}.`;
  }

  // repairable counts what a repair of the drift out found would change.
  function repairable(out) {
    const n = (kind) => out.drift.filter((d) => d.kind === kind).length;
    return { missing: n('missing_row'), stats: n('stats_mismatch') };
  }

  function forgetCheck() {
    checked = null;
    if (vRepair) {
      vRepair.disabled = true;
      vRepair.textContent = 'Repair…';
    }
  }

  vForm.addEventListener('input', forgetCheck);
  vForm.addEventListener('change', forgetCheck);

  vForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    forgetCheck();
    try {
      const w = vWindow();
      const out = await verify(w, false);
      o.fieldErrors(vForm, null, 'v');
      showDrift(out);
      o.announce(vResult, words(out));
      const r = repairable(out);
      if (vRepair && r.missing + r.stats > 0) {
        checked = { key: JSON.stringify(w), ...r };
        vRepair.disabled = false;
        vRepair.textContent = `Repair ${o.counted(r.missing + r.stats, 'drift')}…`;
      }
    } catch (err) {
      if (!o.fieldErrors(vForm, err, 'v')) o.announce(vResult, err.message, true);
      else vResult.textContent = err.message;
    }
  });

  if (vRepair) {
    vRepair.addEventListener('click', async () => {
      const w = vWindow();
      if (!checked || checked.key !== JSON.stringify(w)) {
        forgetCheck();
        o.announce(vResult, 'The window changed: check it again first.', true);
        return;
      }
      if (!(await o.confirm(`Repair ${o.counted(checked.missing + checked.stats, 'drift')}?`,
        `${o.counted(checked.missing, 'synced original')} without a row will be re-published (their days' statistics recomputed `
        + `first), and ${o.counted(checked.stats, 'statistics row')} recomputed from their rows. Rows without an original are only reported.`, 'Repair'))) {
        return;
      }
      forgetCheck();
      try {
        const out = await verify(vWindow(), true);
        showDrift(out);
        o.announce(vResult, words(out) + ` Repaired: ${o.fmtNum(out.republished)} re-published, ${o.fmtNum(out.statsRecomputed)} statistics rows recomputed. `
          + 'Check again once the worker caught up.');
      } catch (err) {
        o.announce(vResult, err.message, true);
      }
    });
  }

  o.start(() => o.refreshNav());
})();
