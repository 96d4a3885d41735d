// The overview: /v1/status and /v1/status/history, read again every few
// seconds (the button pauses it), with two small SVG charts.
'use strict';

(() => {
  const o = outboxd;
  const { h } = o;
  const updated = document.getElementById('updated');
  const loadError = document.getElementById('load-error');
  const pause = document.getElementById('pause');
  let paused = false;
  let timer = null;

  function set(field, value) {
    const el = document.querySelector(`[data-field="${field}"]`);
    if (!el) return;
    o.clear(el).append(value instanceof Node ? value : String(value === undefined || value === null ? '–' : value));
  }

  function showStatus(s) {
    const unavailable = s.unavailable || [];
    const gone = (part) => unavailable.includes(part);
    const u = document.getElementById('unavailable');
    u.hidden = unavailable.length === 0;
    u.textContent = unavailable.length ? `Could not be read now: ${unavailable.join(', ')}. Their figures are left out.` : '';

    const e = s.events;
    set('total', e ? o.fmtNum(e.total) + (e.estimated ? ' (estimate)' : '') : 'unavailable');
    set('synced', e ? o.fmtNum(e.synced) : 'unavailable');
    set('pending', e ? o.fmtNum(e.pending) : 'unavailable');
    set('failed', e ? o.fmtNum(e.failed) : 'unavailable');
    const cats = e ? Object.entries(e.failedByCategory || {}).filter(([, n]) => n > 0) : [];
    set('failedByCategory', cats.length ? 'Parked by category: ' + cats.map(([c, n]) => `${c} ${o.fmtNum(n)}`).join(', ') : '');
    if (!e) {
      set('oldest', 'unavailable');
    } else {
      set('oldest', e.pending === 0 ? 'none pending' : o.fmtAge(s.oldestPendingAgeSeconds));
    }
    set('undispatched', s.outbox ? o.fmtNum(s.outbox.undispatched) : 'unavailable');
    set('streamName', s.stream ? s.stream.name : '');
    set('streamLength', s.stream ? o.fmtNum(s.stream.length) : (gone('stream') ? 'unavailable' : 'no Redis here'));
    set('streamPending', s.stream ? o.fmtNum(s.stream.pending) : (gone('stream') ? 'unavailable' : 'no Redis here'));
    showRedis(s, gone);
    const rp = s.replay;
    const noReplay = gone('replay') ? 'unavailable' : 'no Redis here';
    set('replayName', rp ? rp.name : '');
    set('replayLag', rp ? (rp.lag === undefined ? 'unknown' : o.fmtNum(rp.lag)) : noReplay);
    set('replayPending', rp ? o.fmtNum(rp.pending) : noReplay);
    set('replayRate', rp ? (rp.ratePerSecond === undefined ? 'measuring' : `${Math.round(rp.ratePerSecond)}/s`) : noReplay);
    set('dlqLength', s.dlq ? o.fmtNum(s.dlq.length) : (gone('dlq') ? 'unavailable' : 'no Redis here'));
    set('dlqOldest', s.dlq && s.dlq.oldestAgeSeconds !== undefined ? o.fmtAge(s.dlq.oldestAgeSeconds) : (s.dlq ? 'none' : '–'));
    o.showDLQCount(s.dlq ? s.dlq.length : null);

    const d = s.dispatcher;
    set('dLeader', d ? (d.leader || 'none') : (gone('dispatcher') ? 'unavailable' : 'never elected'));
    set('dAlive', d ? o.state(d.leaderAlive ? 'alive' : 'expired') : '–');
    set('dTerm', d ? o.fmtNum(d.term) : '–');
    set('dExpires', d ? o.timeEl(d.leaseExpiresAt) : '–');
    set('dCheckpoint', d && d.checkpointAgeSeconds !== undefined ? o.fmtAge(d.checkpointAgeSeconds) : (d ? 'never' : '–'));

    const r = s.reconciler;
    set('rLeader', r && r.leader ? h('span', {}, r.leader + ' ', o.state(r.leaderAlive ? 'alive' : 'expired')) : 'none (no periodic reconciler holds the lease)');
    set('rLastSweep', r && r.lastSweepAt ? h('span', {}, o.timeEl(r.lastSweepAt), ` (${o.fmtAge(r.lastSweepAgeSeconds)} ago)`) : 'never recorded');

    const tbody = o.clear(document.querySelector('#breakers tbody'));
    for (const b of s.breakers || []) {
      tbody.append(h('tr', {}, h('td', { text: b.component }), h('td', { text: b.name }), h('td', {}, o.state(b.state))));
    }
    if (!(s.breakers || []).length) {
      tbody.append(h('tr', {}, h('td', { colspan: 3, class: 'empty', text: 'None in this process (it runs no worker and no dispatcher).' })));
    }
    showAudit(s.audit, gone('audit'), s.readModel);

    const halted = s.retriesHalted || [];
    set('halted', halted.length
      ? h('span', {}, o.state('halted'), ' Automatic retries halted for: ' + halted.map((x) => `${x.component}/${x.class}`).join(', '))
      : 'Retries halted: none.');
    return r && r.lastReport ? r.lastReport : null;
  }

  // fmtBytes writes a size in MiB (or KiB below one MiB).
  function fmtBytes(n) {
    return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${Math.round(n / 1024)} KiB`;
  }

  // showRedis shows every consumer group's lag, Redis's used and maximum
  // memory, its policy (eviction is a misconfiguration), the relay's hold
  // (backpressure) and why the pipeline is stalled, as /v1/status has them.
  function showRedis(s, gone) {
    const groups = o.clear(document.getElementById('stream-groups'));
    for (const g of (s.stream && s.stream.groups) || []) {
      const lag = g.lag === undefined || g.lag === null ? 'unknown' : o.fmtNum(g.lag);
      groups.append(h('li', { 'data-group': g.name }, h('strong', { text: g.name }),
        `: lag ${lag}, pending ${o.fmtNum(g.pending)}, read ${o.fmtNum(g.entriesRead)}`));
    }
    const m = s.redis;
    const none = gone('redis') ? 'unavailable' : 'no Redis here';
    set('redisUsed', m ? h('span', {}, fmtBytes(m.usedMemoryBytes),
      m.maxMemoryBytes > 0 ? ` (${Math.round(100 * m.usedMemoryBytes / m.maxMemoryBytes)}%)` : '',
      m.full ? ' ' : '', m.full ? o.state('full') : '') : none);
    set('redisMax', m ? (m.maxMemoryBytes > 0 ? fmtBytes(m.maxMemoryBytes) : 'no limit') : none);
    set('redisPolicy', m ? `maxmemory-policy ${m.maxMemoryPolicy || 'unknown'}` : '');
    document.getElementById('redis-eviction').hidden = !(m && m.evictionMisconfigured);
    set('relayHold', s.backpressure ? h('span', {}, o.state('holds'), ` ${s.backpressure}`)
      : (s.dispatcher ? 'relays' : 'no dispatcher here'));
    const stalled = s.stalled || [];
    const el = document.getElementById('stalled');
    el.hidden = stalled.length === 0;
    el.textContent = stalled.length ? `Stalled: ${stalled.join('; ')}.` : '';
  }

  // showAudit shows the last run of the read model's audit: what it
  // compared, the drift by kind, a few findings and the repair commands.
  // A read model that cannot be checked says so, once, instead.
  function showAudit(a, unavailable, readModel) {
    const findings = o.clear(document.getElementById('audit-findings'));
    const repair = document.getElementById('audit-repair');
    const commands = o.clear(repair.querySelector('ul'));
    repair.hidden = true;
    if (readModel && !readModel.checkable) {
      set('aLastRun', 'off: this read model cannot be checked (' + readModel.unchecked + ')');
      set('aChecked', '–');
      set('aDrift', '–');
      return;
    }
    if (!a) {
      const none = unavailable ? 'unavailable' : 'never ran (it runs with reconcile --every and dev; this role needs PostgreSQL to show it)';
      set('aLastRun', none);
      set('aChecked', '–');
      set('aDrift', '–');
      return;
    }
    set('aLastRun', h('span', {}, o.timeEl(a.startedAt)));
    set('aChecked', `${o.fmtNum(a.checked)} originals, ${o.fmtNum(a.statsChecked)} statistics rows`);
    const kinds = Object.entries(a.drift || {}).filter(([, n]) => n > 0);
    set('aDrift', kinds.length
      ? h('span', {}, o.state('drift'), ' ' + kinds.map(([k, n]) => `${k} ${o.fmtNum(n)}`).join(', ') + ` (ratio ${(100 * a.driftRatio).toFixed(4)}%)`)
      : h('span', {}, o.state('exact'), ' none found'));
    for (const f of a.findings || []) {
      const where = ` ${f.sourceKey}/${f.deviceKey} ${f.day}` + (f.detail ? ': ' + f.detail : '');
      findings.append(h('li', {}, h('strong', { text: f.kind }), ' ', f.eventId ? o.journeyLink(f.eventId) : '', where));
    }
    for (const c of a.repair || []) {
      commands.append(h('li', {}, h('code', { text: c })));
    }
    repair.hidden = !(a.repair || []).length;
  }

  function showSweeps(sweeps) {
    const tbody = o.clear(document.querySelector('#sweeps tbody'));
    for (const w of sweeps) {
      const failed = (w.claimFailed || 0) + (w.publishFailed || 0) + (w.rollbackFailed || 0);
      tbody.append(h('tr', {},
        h('th', { scope: 'row' }, o.timeEl(w.startedAt)),
        h('td', { text: o.fmtNum(w.scanned) + (w.limitReached ? ' (limit)' : '') }),
        h('td', { text: o.fmtNum(w.claimed) }), h('td', { text: o.fmtNum(w.published) }),
        h('td', { text: o.fmtNum(w.skipped) }), h('td', { text: o.fmtNum(w.exhausted) }),
        h('td', {}, failed ? o.state('failed') : 'none', failed ? ` ${failed}` : ''),
        h('td', { text: w.oldestUnsyncedAgeSeconds ? o.fmtAge(w.oldestUnsyncedAgeSeconds) : 'none' }),
        h('td', { text: o.fmtSeconds(w.durationSeconds) })));
    }
    if (!sweeps.length) {
      tbody.append(h('tr', {}, h('td', { colspan: 9, class: 'empty', text: 'No sweep in this process yet (a reconciler runs in dev and reconcile --every).' })));
    }
  }

  // niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // chart draws series [{name, cls, points: [[t, v|null]]}] into a figure:
  // an SVG with a line per series (distinct dash patterns, so colour is not
  // needed to tell them apart), and a legend that states the last and the
  // highest value in words, which is also the chart's text alternative.
  function chart(figure, series, fmt) {
    const plot = o.clear(figure.querySelector('.plot'));
    // One unit of the drawing is one pixel of the box, so the labels keep
    // their size at every width (the next refresh follows a resize).
    const W = Math.max(280, Math.round(plot.clientWidth || 600)), H = 168, L = 56, R = 10, T = 10, B = 24;
    const all = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
    const legend = o.clear(figure.querySelector('.legend'));
    // The time axis spans every sample, with a value or not, so both
    // charts share it.
    const times = series.flatMap((s) => s.points.map((p) => p[0]));
    if (new Set(times).size < 2 || all.length === 0) {
      plot.append(h('p', { class: 'empty', text: all.length ? 'Not enough samples yet: the chart appears after two.' : 'No value in the samples kept.' }));
      return;
    }
    const t0 = Math.min(...times), t1 = Math.max(...times);
    const top = niceMax(Math.max(...all.map((p) => p[1])));
    const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const words = series.map((s) => {
      const vals = s.points.filter((p) => p[1] !== null);
      const last = vals.length ? vals[vals.length - 1][1] : null;
      const high = vals.length ? Math.max(...vals.map((p) => p[1])) : null;
      return { s, text: last === null ? `${s.name}: no value` : `${s.name}: last ${fmt(last)}, highest ${fmt(high)}` };
    });
    const minutes = Math.max(1, Math.round((t1 - t0) / 60000));
    const label = `${figure.querySelector('figcaption').textContent} over the last ${minutes} min. ` + words.map((w) => w.text).join('; ') + '.';
    const svg = h('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, preserveAspectRatio: 'none' });
    for (const frac of [0, 0.5, 1]) {
      const v = top * frac;
      svg.append(h('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }),
        h('text', { x: L - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end', text: fmt(v) }));
    }
    svg.append(h('text', { x: L, y: H - 6, class: 'axis', text: new Date(t0).toISOString().slice(11, 19) + ' UTC' }),
      h('text', { x: W - R, y: H - 6, class: 'axis', 'text-anchor': 'end', text: new Date(t1).toISOString().slice(11, 19) + ' UTC' }));
    for (const s of series) {
      // A missing value breaks the line.
      let run = [];
      const flush = () => {
        if (run.length > 1) {
          svg.append(h('polyline', { class: `line ${s.cls}`, points: run.map((p) => p.join(',')).join(' ') }));
        } else if (run.length === 1) {
          // A value between two gaps is a point.
          svg.append(h('circle', { class: `dot ${s.cls}`, cx: run[0][0], cy: run[0][1], r: 3.5 }));
        }
        run = [];
      };
      for (const [t, v] of s.points) {
        if (v === null) {
          flush();
        } else {
          run.push([x(t).toFixed(1), y(v).toFixed(1)]);
        }
      }
      flush();
    }
    plot.append(svg);
    for (const w of words) {
      legend.append(h('li', {}, h('svg', { viewBox: '0 0 30 10', class: 'swatch', 'aria-hidden': 'true' },
        h('line', { x1: 0, x2: 30, y1: 5, y2: 5, class: `line ${w.s.cls}` })), w.text));
    }
  }

  function showHistory(page) {
    const samples = page.samples || [];
    const at = (sm) => new Date(sm.at).getTime();
    const val = (v) => (v === undefined ? null : v);
    const rate = (v) => `${v < 10 ? v.toFixed(1) : Math.round(v)}/s`;
    chart(document.getElementById('chart-throughput'), [
      { name: 'Ingested', cls: 's1', points: samples.map((sm) => [at(sm), val(sm.ingestedPerSecond)]) },
      { name: 'Synced', cls: 's2', points: samples.map((sm) => [at(sm), val(sm.syncedPerSecond)]) },
      { name: 'Replayed (read from the replay lane)', cls: 's3', points: samples.map((sm) => [at(sm), val(sm.replayedPerSecond)]) },
    ], rate);
    chart(document.getElementById('chart-latency'), [
      { name: 'p50', cls: 's1', points: samples.map((sm) => [at(sm), sm.latency ? sm.latency.p50Seconds : null]) },
      { name: 'p95', cls: 's2', points: samples.map((sm) => [at(sm), sm.latency ? sm.latency.p95Seconds : null]) },
    ], o.fmtSeconds);
    document.getElementById('history-note').textContent = `Sampled in this process every ${page.everySeconds} s, `
      + `${samples.length} samples kept; the latency is that of the originals its workers synced (operator replays left out), `
      + 'and has gaps where none was synced.';
  }

  const stageWords = {
    relay: 'Relay, every partition', projection: 'Live projection', replay: 'Replay lane',
  };

  // stageName says what a stage is: "relay", "relay:3", "projection:g"…
  function stageName(stage) {
    const [kind, arg] = stage.split(':');
    if (kind === 'relay' && arg !== undefined) return `Relay, partition ${arg}`;
    return stageWords[kind] + (arg ? ` (group ${arg})` : '');
  }

  async function stageAction(path, stage, verb) {
    const result = document.getElementById('stage-result');
    try {
      const r = await o.api('POST', path, { stage, by: 'console' });
      o.announce(result, `${stageName(r.stage)}: ${verb}${r.changed ? '' : ' already'}.`);
    } catch (err) {
      o.announce(result, err.message, true);
    }
    load();
  }

  // showStages lists every stage that may be paused with its state; one
  // partition's relay is listed when the stream has partitions (or it is
  // paused).
  function showStages(p) {
    const tbody = o.clear(document.querySelector('#stages tbody'));
    const paused = new Map((p.paused || []).map((x) => [x.stage, x]));
    const partitioned = (p.stages || []).includes('relay:1');
    for (const stage of p.stages || []) {
      if (/^relay:\d+$/.test(stage) && !partitioned && !paused.has(stage)) continue;
      const pp = paused.get(stage);
      const stateCell = pp
        ? h('span', {}, o.state('paused'), ` by ${pp.by} since `, o.timeEl(pp.since))
        : o.state('running');
      const tr = h('tr', { 'data-stage': stage }, h('th', { scope: 'row' }, stageName(stage), ' ', o.code(stage)), h('td', {}, stateCell));
      if (o.canAct()) {
        const b = pp
          ? h('button', { type: 'button', 'data-action': 'resume', 'aria-label': `Resume ${stageName(stage)}`, text: 'Resume' })
          : h('button', { type: 'button', 'data-action': 'pause', class: 'danger', 'aria-label': `Pause ${stageName(stage)}`, text: 'Pause…' });
        b.addEventListener('click', async () => {
          if (pp) {
            stageAction('/v1/admin/resume', stage, 'resumed');
          } else if (await o.confirm(`Pause ${stageName(stage).toLowerCase()}?`, 'Every replica stops this stage within a second, '
            + 'until someone resumes it; its work waits (nothing is lost). An hour paused raises OutboxdPausedLong.', 'Pause')) {
            stageAction('/v1/admin/pause', stage, 'paused');
          }
        });
        tr.append(h('td', { class: 'actions' }, b));
      }
      tbody.append(tr);
    }
  }

  async function load() {
    const [status, history, pauses] = await Promise.allSettled([o.api('GET', '/v1/status'), o.api('GET', '/v1/status/history'),
      o.api('GET', '/v1/admin/pauses')]);
    if (pauses.status === 'fulfilled') {
      showStages(pauses.value);
    } else {
      const tbody = o.clear(document.querySelector('#stages tbody'));
      const cols = document.querySelectorAll('#stages thead th').length;
      tbody.append(h('tr', {}, h('td', { colspan: cols, class: 'empty', text: 'Not available here: ' + pauses.reason.message })));
    }
    if (status.status === 'rejected') {
      o.showError(loadError, status.reason);
      if (status.reason.status === 401) return; // entering the token loads again
    } else {
      o.hideError(loadError);
      const last = showStatus(status.value);
      if (history.status === 'fulfilled') {
        showHistory(history.value);
        showSweeps(history.value.sweeps.length ? history.value.sweeps : (last ? [last] : []));
      } else {
        showSweeps(last ? [last] : []);
        document.getElementById('history-note').textContent = 'This instance keeps no history: ' + history.reason.message;
      }
      updated.textContent = `Updated ${new Date().toISOString().slice(11, 19)} UTC; `
        + (paused ? 'refresh paused.' : `refreshes every ${o.refreshSeconds} s.`);
    }
    schedule();
  }

  function schedule() {
    clearTimeout(timer);
    if (!paused) timer = setTimeout(load, o.refreshSeconds * 1000);
  }

  pause.addEventListener('click', () => {
    paused = !paused;
    pause.textContent = paused ? 'Resume refresh' : 'Pause refresh';
    if (paused) {
      clearTimeout(timer);
      updated.textContent = updated.textContent.replace(/refreshes every \d+ s\./, 'refresh paused.');
    } else {
      load();
    }
  });

  o.start(load);
})();
