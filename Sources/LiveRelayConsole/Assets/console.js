// LiveRelay tenant console (docs/console.md).
// A single page over the public HTTP API, with the master key the person pastes. The key lives in
// sessionStorage only (never in local storage, never in a cookie); every call sends it as
// `Authorization: Bearer …` to this origin. Served with `Content-Security-Policy: default-src
// 'self'`: no inline script or style, no other origin, every element built with the DOM API.
'use strict';

(function () {
  const KEY_SLOT = 'liverelay.console.master_key';
  const OP_STATUSES = ['accepted', 'failed', 'unknown', 'expired', 'cancelled', 'superseded', 'queued', 'sending'];
  const TARGET_STATUSES = ['reserved', 'starting', 'token_pending', 'ready', 'ending', 'ended', 'creation_failed', 'start_unknown'];
  const PERMISSIONS = ['activities:start', 'activities:update', 'activities:end', 'activities:read-state'];
  const SVG = 'http://www.w3.org/2000/svg';
  const main = document.getElementById('main');
  let renderSeq = 0;

  // ---- DOM helpers -------------------------------------------------------------------------

  /** h('tag.class', {attr: value, onclick: fn}, ...children): an element; strings become text. */
  function h(spec, attrs, ...children) {
    const [tag, ...classes] = spec.split('.');
    const el = document.createElement(tag);
    if (classes.length) el.className = classes.join(' ');
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'value' && 'value' in el) el.value = v;
      else if (k === 'checked' && 'checked' in el) el.checked = !!v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }
  function code(text) { return h('code', {}, text === null || text === undefined ? '—' : String(text)); }
  function dash(v) { return v === null || v === undefined || v === '' ? '—' : String(v); }
  function when(ts) {
    if (!ts) return '—';
    const d = new Date(ts);
    return h('time', { datetime: ts, title: ts }, isNaN(d) ? ts : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC'));
  }
  function table(headers, rows, emptyText) {
    if (!rows.length) return h('p.empty', {}, emptyText || 'Nothing yet.');
    return h('div.table-wrap', { tabindex: '0', role: 'region', 'aria-label': headers.join(', ') },
      h('table', {}, h('thead', {}, h('tr', {}, headers.map(x => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, rows.map(r => h('tr', {}, r.map(c => c instanceof Node && c.tagName === 'TD' ? c : h('td', {}, c)))))));
  }
  function kv(pairs) { return h('dl.kv', {}, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])); }
  function badge(text, tone) { return h('span.badge.b-' + (tone || 'idle'), {}, text); }
  function statusTone(s) {
    return {
      ready: 'ok', accepted: 'ok', active: 'ok', enabled: 'ok', current: 'ok', registered: 'ok',
      reserved: 'info', starting: 'info', queued: 'warn', sending: 'warn', token_pending: 'warn', pending: 'warn', ending: 'warn', expiring: 'warn', revoking: 'warn', stale: 'warn',
      failed: 'bad', creation_failed: 'bad', start_unknown: 'bad', unknown: 'bad', expired: 'bad', revoked: 'bad', disabled: 'bad', invalid: 'bad', failing: 'bad',
    }[s] || 'idle';
  }
  function statusBadge(s) { return badge(dash(s), statusTone(s)); }
  function link(href, text) { return h('a', { href }, text); }
  function idempotencyKey() {
    if (window.crypto && crypto.randomUUID) return 'console-' + crypto.randomUUID();
    const b = new Uint8Array(16); crypto.getRandomValues(b);
    return 'console-' + Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
  }
  function splitIds(text) { return text.split(/[\s,]+/).map(s => s.trim()).filter(Boolean); }

  // ---- API -----------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, details, requestId) {
      super(message); this.status = status; this.code = code; this.details = details || {}; this.requestId = requestId;
    }
  }
  function masterKey() { return sessionStorage.getItem(KEY_SLOT); }

  /** One call of the public API on this origin; resolves to the JSON body, rejects with ApiError. */
  async function api(method, path, body, keyOverride) {
    const headers = { 'Authorization': 'Bearer ' + (keyOverride || masterKey() || '') };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'omit', cache: 'no-store', redirect: 'error' });
    } catch (e) {
      throw new ApiError(0, 'NETWORK_ERROR', 'The LiveRelay server could not be reached.', {}, null);
    }
    const requestId = res.headers.get('X-Request-Id');
    let json = null;
    const text = await res.text();
    if (text) { try { json = JSON.parse(text); } catch (e) { json = null; } }
    if (!res.ok) {
      const e = (json && json.error) || {};
      throw new ApiError(res.status, e.code || ('HTTP_' + res.status), e.message || res.statusText || 'request failed', e.details, e.request_id || requestId);
    }
    return json;
  }
  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
    const s = q.toString();
    return s ? '?' + s : '';
  }

  /** The error envelope, readable: code, HTTP status, message, details, request id. */
  function errorBox(err, hint) {
    const e = err instanceof ApiError ? err : new ApiError(0, 'CONSOLE_ERROR', String(err && err.message || err), {}, null);
    const details = e.details && Object.keys(e.details).length ? JSON.stringify(e.details) : null;
    return h('div.error', { role: 'alert' },
      h('div', {}, h('span.code', {}, e.code), e.status ? ' (HTTP ' + e.status + ')' : '', ': ', e.message),
      hint ? h('p', {}, hint) : null,
      kv([details ? ['Details', code(details)] : null, ['Request id', h('code.request-id', {}, dash(e.requestId))]]));
  }
  function secretBox(title, credential, note) {
    const input = h('input', { type: 'text', readonly: true, value: credential, 'aria-label': title + ' credential', spellcheck: 'false', autocomplete: 'off' });
    const copied = h('span.muted', { 'aria-live': 'polite' });
    const box = h('div.secret', { role: 'status' },
      h('strong', {}, title), h('p', {}, 'Copy this credential now: it is shown only once and cannot be shown again.'),
      input,
      h('div.row', {},
        h('button', { type: 'button', class: 'copy', onclick: async () => {
          try { await navigator.clipboard.writeText(credential); copied.textContent = 'Copied.'; }
          catch (err) { input.select(); copied.textContent = 'Select the text and copy it (Ctrl+C).'; }
        } }, 'Copy'),
        h('button.secondary', { type: 'button', onclick: () => box.remove() }, 'Done, hide it'), copied),
      note ? h('p.muted', {}, note) : null);
    return box;
  }
  /** A destructive button that asks once more (inline, keyboard-reachable) before acting. */
  function confirmButton(label, confirmLabel, action) {
    const wrap = h('span.confirm-wrap');
    const start = h('button.danger', { type: 'button', onclick: () => {
      clear(wrap);
      const yes = h('button.danger.confirm', { type: 'button', onclick: async () => { yes.disabled = true; await action(); } }, confirmLabel);
      const no = h('button.secondary', { type: 'button', onclick: () => { clear(wrap); wrap.append(start); start.focus(); } }, 'Cancel');
      wrap.append(yes, ' ', no);
      yes.focus();
    } }, label);
    wrap.append(start);
    return wrap;
  }

  // ---- routing -------------------------------------------------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, '') || '/overview';
    const [path, q] = raw.split('?');
    return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(q || '') };
  }
  function go(hash) { if (location.hash === hash) render(); else location.hash = hash; }

  async function render() {
    const seq = ++renderSeq;
    const signedIn = !!masterKey();
    document.getElementById('nav').hidden = !signedIn;
    document.getElementById('sign-out').hidden = !signedIn;
    clear(main);
    if (!signedIn) { viewSignIn(); return; }
    const { parts, params } = parseHash();
    const view = parts[0] || 'overview';
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.view === view || (view === 'operations' && a.dataset.view === 'targets')) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const views = { overview: viewOverview, targets: parts[1] ? () => viewTarget(parts[1], params) : () => viewTargets(params),
      operations: () => viewOperation(parts[1]), keys: viewKeys, audit: () => viewAudit(params),
      webhooks: parts[1] ? () => viewWebhook(parts[1], params) : viewWebhooks };
    const fn = views[view];
    const section = h('section', { 'data-view': view });
    main.append(section);
    if (!fn) { section.append(h('h1', { tabindex: '-1' }, 'Not found'), h('p', {}, 'No such view. '), link('#/overview', 'Overview')); return; }
    section.append(h('p.muted.loading', {}, 'Loading…'));
    try {
      const content = await fn();
      if (seq !== renderSeq) return;
      clear(section);
      section.append(content);
    } catch (err) {
      if (seq !== renderSeq) return;
      clear(section);
      section.append(h('h1', { tabindex: '-1' }, 'Something went wrong'), errorBox(err));
    }
    section.setAttribute('data-ready', 'true');
    const h1 = section.querySelector('h1');
    if (h1 && document.activeElement && document.activeElement.closest && !document.activeElement.closest('header')) h1.focus({ preventScroll: true });
  }

  // ---- sign in -------------------------------------------------------------------------------

  function viewSignIn() {
    const input = h('input', { type: 'password', id: 'master-key', name: 'master-key', autocomplete: 'off', spellcheck: 'false', required: true, placeholder: 'lrm_…' });
    const status = h('div');
    const form = h('form.panel.signin.stack', { onsubmit: async (ev) => {
      ev.preventDefault();
      clear(status);
      const key = input.value.trim();
      try {
        await api('GET', '/v1/master-keys?limit=1', undefined, key);
      } catch (err) {
        status.append(errorBox(err, err.status === 403 ? 'The console needs a master key (lrm_…).' : null));
        return;
      }
      sessionStorage.setItem(KEY_SLOT, key);
      input.value = '';
      go('#/overview');
    } },
      h('h1', { tabindex: '-1' }, 'Sign in to the LiveRelay console'),
      h('p', {}, 'Paste a master key of your tenant. It stays in this browser tab only (sessionStorage) and is sent to this server as the Authorization header of the API calls the console makes; closing the tab forgets it.'),
      h('label', { for: 'master-key' }, 'Master key', input),
      h('div', {}, h('button', { type: 'submit' }, 'Sign in')),
      status);
    main.append(h('section', { 'data-view': 'signin', 'data-ready': 'true' }, form));
    input.focus();
  }

  // ---- overview ------------------------------------------------------------------------------

  async function viewOverview() {
    const [usage, daily, creds] = await Promise.allSettled([
      api('GET', '/v1/remote-updates/usage'), api('GET', '/v1/remote-updates/usage/daily?days=7'), api('GET', '/v1/provider-credentials')]);
    const out = h('div', {}, h('h1', { tabindex: '-1' }, 'Overview'));
    const quota = h('div.panel', {}, h('h2', {}, 'Today\u2019s push quota'));
    if (usage.status === 'fulfilled') {
      const u = usage.value;
      quota.append(h('p.muted', {}, 'UTC day ', u.day, '; resets ', when(u.resets_at), '.'),
        h('div.grid.quota', {},
          [['Daily limit', u.limit, 'limit'], ['Used', u.used, 'used'], ['Reserved', u.reserved, 'reserved'], ['Remaining', u.remaining, 'remaining']]
            .map(([l, v, k]) => h('div.card', { 'data-quota': k }, h('div.label', {}, l), h('div.value', {}, String(v))))),
        quotaMeter(u));
    } else quota.append(errorBox(usage.reason));
    out.append(quota);
    const chart = h('div.panel', {}, h('h2', {}, 'Outcomes, last 7 days'),
      h('p.muted', {}, 'Operations accepted by the API each UTC day, by their current status.'));
    if (daily.status === 'fulfilled') chart.append(outcomeChart(daily.value.data));
    else chart.append(errorBox(daily.reason));
    out.append(chart);
    const health = h('div.panel', {}, h('h2', {}, 'Provider credentials'));
    if (creds.status === 'fulfilled') health.append(credentialTable(creds.value.data));
    else health.append(errorBox(creds.reason));
    out.append(health);
    return out;
  }

  function quotaMeter(u) {
    const total = Math.max(1, u.limit);
    const w = 600, used = Math.min(w, w * u.used / total), reserved = Math.min(w - used, w * u.reserved / total);
    return svg('svg', { class: 'chart meter', viewBox: '0 0 600 18', role: 'img', preserveAspectRatio: 'none',
      'aria-label': `Quota: ${u.used} used, ${u.reserved} reserved, ${u.remaining} remaining of ${u.limit}` },
      svg('rect', { class: 'meter-free', x: 0, y: 0, width: w, height: 18, rx: 4 }),
      svg('rect', { class: 'meter-used', x: 0, y: 0, width: used.toFixed(2), height: 18 }),
      svg('rect', { class: 'meter-reserved', x: used.toFixed(2), y: 0, width: reserved.toFixed(2), height: 18 }));
  }

  /** A stacked bar per day (inline SVG drawn here), a legend, and the same numbers as a table. */
  function outcomeChart(days) {
    const W = 720, H = 250, left = 44, right = 10, top = 12, bottom = 30;
    const max = Math.max(1, ...days.map(d => d.total));
    const step = niceStep(max);
    const yMax = Math.ceil(max / step) * step;
    const plotH = H - top - bottom, plotW = W - left - right;
    const slot = plotW / days.length, barW = Math.min(64, slot * 0.62);
    const y = v => top + plotH - plotH * v / yMax;
    const parts = [];
    for (let v = 0; v <= yMax; v += step) {
      parts.push(svg('line', { class: 'grid-line', x1: left, x2: W - right, y1: y(v).toFixed(1), y2: y(v).toFixed(1) }));
      parts.push(svg('text', { x: left - 6, y: (y(v) + 4).toFixed(1), 'text-anchor': 'end' }, String(v)));
    }
    days.forEach((d, i) => {
      const x = left + slot * i + (slot - barW) / 2;
      let acc = 0;
      for (const s of OP_STATUSES) {
        const n = (d.outcomes && d.outcomes[s]) || 0;
        if (!n) continue;
        const y0 = y(acc + n), hgt = y(acc) - y(acc + n);
        parts.push(svg('rect', { class: 's-' + s, x: x.toFixed(1), y: y0.toFixed(1), width: barW.toFixed(1), height: Math.max(0.5, hgt).toFixed(1), 'data-day': d.day, 'data-status': s },
          svg('title', {}, `${d.day}: ${n} ${s}`)));
        acc += n;
      }
      parts.push(svg('text', { x: (x + barW / 2).toFixed(1), y: H - 10, 'text-anchor': 'middle' }, d.day.slice(5)));
      if (d.total) parts.push(svg('text', { x: (x + barW / 2).toFixed(1), y: (y(d.total) - 4).toFixed(1), 'text-anchor': 'middle' }, String(d.total)));
    });
    parts.push(svg('line', { class: 'axis', x1: left, x2: W - right, y1: y(0), y2: y(0) }));
    const summary = days.map(d => `${d.day}: ${d.total}`).join('; ');
    const chart = svg('svg', { class: 'chart outcomes', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Operations per day by status. ' + summary }, parts);
    const legend = h('ul.legend', {}, OP_STATUSES.map(s => h('li', {}, h('span.swatch.s-' + s), s)));
    const rows = days.map(d => [d.day, ...OP_STATUSES.map(s => String((d.outcomes && d.outcomes[s]) || 0)), String(d.total), String(d.quota_used)]);
    const details = h('details', {}, h('summary', {}, 'Show the numbers as a table'),
      table(['Day', ...OP_STATUSES, 'Total', 'Quota used'], rows));
    return h('div', {}, chart, legend, details);
  }
  function niceStep(max) {
    const raw = max / 4, pow = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return Math.max(1, m * pow);
    return Math.max(1, 10 * pow);
  }
  function credentialTable(list) {
    if (!list.length) return h('p.empty', {}, 'No provider credentials yet: PUT /v1/provider-credentials/apns or /fcm.');
    return table(['Provider', 'Scope', 'Fingerprint', 'Health', 'Last success', 'Last failure', 'Failure reason'], list.map(c => {
      const ok = c.last_success_at && (!c.last_failure_at || c.last_success_at >= c.last_failure_at);
      const health = c.last_failure_at && !ok ? statusBadge('failing') : (c.last_success_at ? badge('ok', 'ok') : badge('not used yet', 'idle'));
      const scope = c.provider === 'apns' ? `${c.environment} · team ${c.team_id} · key ${c.key_id}` : `project ${c.project_id}`;
      return [h('strong', {}, c.provider.toUpperCase()), scope, code(c.fingerprint), health, when(c.last_success_at), when(c.last_failure_at), dash(c.last_failure_reason)];
    }));
  }

  // ---- targets -------------------------------------------------------------------------------

  async function viewTargets(params) {
    const f = { status: params.get('status') || '', business_key: params.get('business_key') || '', installation_id: params.get('installation_id') || '',
      start_target_id: params.get('start_target_id') || '', limit: params.get('limit') || '25', cursor: params.get('cursor') || '' };
    const page = await api('GET', '/v1/remote-updates/live-activities/targets' + query(f));
    const statusSel = h('select', { name: 'status' }, h('option', { value: '' }, 'any status'), TARGET_STATUSES.map(s => h('option', { value: s, selected: s === f.status }, s)));
    const limitSel = h('select', { name: 'limit' }, ['5', '10', '25', '50', '100', '200'].map(n => h('option', { value: n, selected: n === f.limit }, n)));
    const inputs = ['business_key', 'installation_id', 'start_target_id'].map(n => h('input', { name: n, value: f[n], type: 'text', spellcheck: 'false' }));
    const form = h('form.filters.panel', { 'aria-label': 'Filter targets', onsubmit: (ev) => {
      ev.preventDefault();
      go('#/targets' + query({ status: statusSel.value, business_key: inputs[0].value.trim(), installation_id: inputs[1].value.trim(),
        start_target_id: inputs[2].value.trim(), limit: limitSel.value === '25' ? '' : limitSel.value }));
    } },
      h('label', {}, 'Status', statusSel), h('label', {}, 'Business key', inputs[0]), h('label', {}, 'Installation', inputs[1]),
      h('label', {}, 'Start target', inputs[2]), h('label', {}, 'Per page', limitSel),
      h('div.row', {}, h('button', { type: 'submit' }, 'Apply filters'), h('button.secondary', { type: 'button', onclick: () => go('#/targets') }, 'Clear')));
    const rows = page.data.map(t => [link('#/targets/' + encodeURIComponent(t.id), t.id), statusBadge(t.status), statusBadge(t.token_status),
      String(t.revision), dash(t.activity_type), t.business_key ? `${t.business_key} / ${dash(t.business_generation)}` : '—', dash(t.origin), when(t.updated_at)]);
    const base = Object.assign({}, f); delete base.cursor;
    if (base.limit === '25') delete base.limit;
    const pager = h('div.pager', {},
      f.cursor ? h('button.secondary', { type: 'button', onclick: () => go('#/targets' + query(base)) }, 'First page') : null,
      page.next_cursor ? h('button', { type: 'button', class: 'next-page', onclick: () => go('#/targets' + query(Object.assign({}, base, { cursor: page.next_cursor }))) }, 'Next page') : null);
    return h('div', {}, h('h1', { tabindex: '-1' }, 'Targets'), form,
      h('p.muted', {}, `${page.data.length} target${page.data.length === 1 ? '' : 's'} on this page, oldest first.`),
      table(['Target', 'Status', 'Token', 'Revision', 'Activity type', 'Business key / generation', 'Origin', 'Updated'], rows, 'No targets match these filters.'),
      pager);
  }

  async function viewTarget(id, params) {
    const [t, ops] = await Promise.all([
      api('GET', '/v1/remote-updates/live-activities/targets/' + encodeURIComponent(id)),
      api('GET', '/v1/remote-updates/live-activities/targets/' + encodeURIComponent(id) + '/operations' + query({ limit: 50 }))]);
    const out = h('div', {}, h('p', {}, link('#/targets', '\u2190 All targets')), h('h1', { tabindex: '-1' }, 'Target ', h('code', {}, t.id)));
    const status = h('div');
    const summary = h('div.panel', {}, h('h2', {}, 'Status'), kv([
      ['Status', h('span', {}, statusBadge(t.status), t.end_reason ? [' ', h('span.muted', {}, 'end reason: '), code(t.end_reason)] : null)],
      ['Token', statusBadge(t.token_status)],
      ['Revision', String(t.revision)],
      ['Origin', dash(t.origin)],
      ['Activity type', dash(t.activity_type)],
      ['Template version', code(t.template_version)],
      ['Installation', link('#/targets' + query({ installation_id: t.installation_id }), t.installation_id)],
      ['Start target', t.start_target_id ? link('#/targets' + query({ start_target_id: t.start_target_id }), t.start_target_id) : '—'],
      ['Business key / generation', t.business_key ? `${t.business_key} / ${dash(t.business_generation)}` : '—'],
      ['Created', when(t.created_at)], ['Started', when(t.started_at)], ['Ended', when(t.ended_at)], ['Updated', when(t.updated_at)],
      ['Stale at', when(t.stale_at)],
    ]), h('p.muted', {}, 'Business state is not shown: the master key reads metadata only (the snapshot needs a sender key with activities:read-state).'));
    if (!['ended', 'creation_failed'].includes(t.status)) {
      summary.append(h('div.row', {}, confirmButton('End activity (cleanup)', 'Confirm: end without new state', async () => {
        try {
          await api('POST', '/v1/remote-updates/live-activities/end', { target_id: t.id, idempotency_key: idempotencyKey() });
          go('#/targets/' + encodeURIComponent(t.id));
        } catch (err) { clear(status); status.append(errorBox(err)); }
      })), status);
    }
    out.append(summary);
    const r = t.last_render_report;
    out.append(h('div.panel.render-report', {}, h('h2', {}, 'Last render report'), r ? kv([
      ['Result', h('span', {}, code(r.stage_code), ' ', r.stale ? badge(`stale: for revision ${r.revision}, target is at ${t.revision}`, 'warn') : badge('current', 'ok'))],
      ['Revision', String(r.revision)], ['Template version', code(r.template_version)], ['Received', when(r.received_at)],
    ]) : h('p.empty', {}, 'The device has not reported a render yet.')));
    const list = h('ol.timeline', { 'aria-label': 'Operations, newest first' });
    const more = h('div.pager');
    const addPage = (page) => {
      for (const op of page.data) list.append(operationItem(op, false));
      clear(more);
      if (page.next_cursor) {
        more.append(h('button.secondary', { type: 'button', onclick: async () => {
          try { addPage(await api('GET', '/v1/remote-updates/live-activities/targets/' + encodeURIComponent(id) + '/operations' + query({ limit: 50, cursor: page.next_cursor }))); }
          catch (err) { more.append(errorBox(err)); }
        } }, 'Older operations'));
      }
    };
    addPage(ops);
    out.append(h('div.panel', {}, h('h2', {}, 'Operations, newest first'), ops.data.length ? list : h('p.empty', {}, 'No operations yet.'), more));
    return out;
  }

  function operationItem(op, standalone) {
    const f = op.failure;
    return h('li', { id: 'op-' + op.id, 'data-operation': op.id, 'data-status': op.status },
      h('div.head', {}, badge(op.kind, 'info'), statusBadge(op.status), h('span', {}, 'revision ', h('strong', {}, String(op.revision))),
        h('span.muted', {}, when(op.created_at)), standalone ? null : link('#/operations/' + encodeURIComponent(op.id), 'details')),
      kv([
        ['Operation', code(op.id)],
        standalone ? ['Target', link('#/targets/' + encodeURIComponent(op.target_id), op.target_id)] : null,
        ['apns-id', code(op.apns_id)],
        op.superseded_by ? ['Superseded by', link('#/operations/' + encodeURIComponent(op.superseded_by), op.superseded_by)] : null,
        op.pending_reason ? ['Pending reason', code(op.pending_reason)] : null,
        f ? ['Failure', h('span.failure', {}, h('strong', { class: 'failure-code' }, dash(f.code)), f.message ? ' \u2014 ' + f.message : '',
          f.provider_status ? ` (provider ${f.provider_status}${f.provider_reason ? ' ' + f.provider_reason : ''})` : '')] : null,
        ['Priority', String(op.priority) + (op.has_alert ? ', with alert' : '') + (op.consumes_quota ? ', counts against quota' : '')],
        ['Accepted', when(op.accepted_at)], ['Updated', when(op.updated_at)],
      ]));
  }

  async function viewOperation(id) {
    const op = await api('GET', '/v1/remote-updates/operations/' + encodeURIComponent(id));
    return h('div', {}, h('p', {}, link('#/targets/' + encodeURIComponent(op.target_id), '\u2190 Target ' + op.target_id)),
      h('h1', { tabindex: '-1' }, 'Operation ', h('code', {}, op.id)),
      h('ol.timeline', {}, operationItem(op, true)));
  }

  // ---- keys ----------------------------------------------------------------------------------

  async function viewKeys() {
    const [senders, masters, pubs] = await Promise.all([
      api('GET', '/v1/remote-updates/sender-keys?limit=200'), api('GET', '/v1/master-keys?limit=200'), api('GET', '/v1/publishable-keys?limit=200')]);
    const me = await currentMasterKeyId(masters.data);
    const out = h('div', {}, h('h1', { tabindex: '-1' }, 'Keys'));
    out.append(senderKeysPanel(senders), masterKeysPanel(masters, me), publishableKeysPanel(pubs));
    return out;
  }
  /** The id inside this session's key (`lrm_<id>_…` → `mk_<id>`), to mark it in the list. */
  async function currentMasterKeyId() {
    const m = /^lrm_([0-9a-z]+)_/.exec(masterKey() || '');
    return m ? 'mk_' + m[1] : null;
  }
  function moreNote(page) { return page.next_cursor ? h('p.muted', {}, 'Showing the first 200; use the API for the rest.') : h('span'); }

  function senderKeysPanel(page) {
    const panel = h('div.panel', { id: 'sender-keys' }, h('h2', {}, 'Sender keys'));
    const flash = h('div');
    const label = h('input', { type: 'text', name: 'label', maxlength: '200' });
    const targets = h('textarea', { name: 'targets', rows: '2', spellcheck: 'false', placeholder: 'st_… or tgt_…, separated by spaces or commas' });
    const createdFrom = h('textarea', { name: 'created_from', rows: '2', spellcheck: 'false', placeholder: 'st_…' });
    const expires = h('input', { type: 'text', name: 'expires_at', placeholder: '2027-01-01T00:00:00Z (optional)', spellcheck: 'false' });
    const perms = PERMISSIONS.map(p => h('input', { type: 'checkbox', name: 'permissions', value: p, checked: p !== 'activities:read-state' }));
    const create = async (body, note) => {
      clear(flash);
      try {
        const k = await api('POST', '/v1/remote-updates/sender-keys', body);
        panelAfterCreate(panel, secretBox('New sender key ' + k.id, k.credential, note));
        return k;
      } catch (err) { flash.append(errorBox(err)); return null; }
    };
    const form = h('form.stack', { 'aria-label': 'Create a sender key', onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { targets: splitIds(targets.value), created_from: splitIds(createdFrom.value), permissions: perms.filter(p => p.checked).map(p => p.value),
        idempotency_key: idempotencyKey() };
      if (label.value.trim()) body.label = label.value.trim();
      if (expires.value.trim()) body.expires_at = expires.value.trim();
      await create(body);
    } },
      h('h3', {}, 'Create a sender key'),
      h('div.filters', {}, h('label', {}, 'Label', label), h('label', {}, 'Expires at', expires)),
      h('label', {}, 'targets (start target and target ids)', targets),
      h('label', {}, 'created_from (start target ids: covers what this key starts from them)', createdFrom),
      h('fieldset', {}, h('legend', {}, 'Permissions'), perms.map(p => h('label.check', {}, p, p.value))),
      h('div', {}, h('button', { type: 'submit', class: 'create-sender-key' }, 'Create sender key')));
    const rows = page.data.map(k => [code(k.id), dash(k.label), k.permissions.join(', '), h('span.mono', {}, k.targets.join(' ') || '—'),
      h('span.mono', {}, k.created_from.join(' ') || '—'), statusBadge(k.status), when(k.expires_at), when(k.created_at),
      h('td.actions', { 'data-key': k.id }, k.status === 'revoked' ? '—' : [
        h('button.secondary', { type: 'button', onclick: async () => {
          const copy = { targets: k.targets, created_from: k.created_from, permissions: k.permissions, label: ((k.label || k.id) + ' (rotated)').slice(0, 200),
            idempotency_key: idempotencyKey() };
          if (k.expires_at) copy.expires_at = k.expires_at;
          await create(copy, `Same coverage as ${k.id}, which keeps working until you revoke it: deploy the new key, then revoke the old one.`);
        } }, 'Rotate'),
        confirmButton('Revoke', 'Confirm revoke', async () => {
          try { await api('POST', '/v1/remote-updates/sender-keys/' + encodeURIComponent(k.id) + '/revoke', { idempotency_key: idempotencyKey() }); go('#/keys'); }
          catch (err) { clear(flash); flash.append(errorBox(err)); }
        })])]);
    panel.append(flash, table(['Id', 'Label', 'Permissions', 'targets', 'created_from', 'Status', 'Expires', 'Created', 'Actions'], rows, 'No sender keys yet.'),
      moreNote(page), form);
    return panel;
  }
  /** Shows the secret box at the top of the (live) panel and re-reads the lists. */
  function panelAfterCreate(panel, box) {
    const live = document.getElementById(panel.id) || panel;
    for (const old of live.querySelectorAll('.secret')) old.remove();
    live.insertBefore(box, live.children[1] || null);
    box.querySelector('input').focus();
    box.querySelector('input').select();
    refreshPanels();
  }
  /** Re-reads the key lists and rebuilds their panels, carrying the secret boxes over (a secret
   *  is never fetchable again, so the box the person has not dismissed must survive). */
  async function refreshPanels() {
    let senders, masters, pubs;
    try {
      [senders, masters, pubs] = await Promise.all([
        api('GET', '/v1/remote-updates/sender-keys?limit=200'), api('GET', '/v1/master-keys?limit=200'), api('GET', '/v1/publishable-keys?limit=200')]);
    } catch (err) { return; /* the next navigation shows the error */ }
    const me = await currentMasterKeyId();
    for (const fresh of [senderKeysPanel(senders), masterKeysPanel(masters, me), publishableKeysPanel(pubs)]) {
      const cur = document.getElementById(fresh.id);
      if (!cur) continue;
      const focused = document.activeElement;
      const boxes = Array.from(cur.querySelectorAll('.secret'));
      for (const box of boxes.reverse()) fresh.insertBefore(box, fresh.children[1] || null);
      cur.replaceWith(fresh);
      if (focused && fresh.contains(focused)) focused.focus();
    }
  }

  function masterKeysPanel(page, me) {
    const panel = h('div.panel', { id: 'master-keys' }, h('h2', {}, 'Master keys'));
    const flash = h('div');
    const grace = h('input', { type: 'number', name: 'grace', min: '0', max: String(30 * 86400), value: '86400' });
    const label = h('input', { type: 'text', name: 'label', maxlength: '200' });
    const form = h('form.inline', { 'aria-label': 'Create a master key', onsubmit: async (ev) => {
      ev.preventDefault();
      clear(flash);
      try {
        const k = await api('POST', '/v1/master-keys', { label: label.value.trim(), idempotency_key: idempotencyKey() });
        panelAfterCreate(panel, secretBox('New master key ' + k.id, k.credential));
      } catch (err) { flash.append(errorBox(err)); }
    } }, h('label', {}, 'Label', label), h('button', { type: 'submit', class: 'create-master-key' }, 'Create master key'));
    const rows = page.data.map(k => [h('span', {}, code(k.id), k.id === me ? [' ', badge('this session', 'info')] : null), dash(k.label), statusBadge(k.status),
      when(k.expires_at), when(k.created_at), h('td.actions', { 'data-key': k.id }, k.status === 'revoked' ? '—' : [
        h('button.secondary', { type: 'button', onclick: async () => {
          clear(flash);
          const seconds = Math.max(0, Math.min(30 * 86400, parseInt(grace.value, 10) || 0));
          try {
            const fresh = await api('POST', '/v1/master-keys', { label: ((k.label || k.id) + ' (rotated)').slice(0, 200), idempotency_key: idempotencyKey() });
            await api('POST', '/v1/master-keys/' + encodeURIComponent(k.id) + '/revoke', { expires_in_seconds: seconds, idempotency_key: idempotencyKey() });
            const box = secretBox('New master key ' + fresh.id, fresh.credential, `${k.id} stops working in ${seconds} seconds.`);
            if (k.id === me) box.append(h('button', { type: 'button', onclick: () => { sessionStorage.setItem(KEY_SLOT, fresh.credential); go('#/keys'); } }, 'Use the new key in this tab'));
            panelAfterCreate(panel, box);
          } catch (err) { flash.append(errorBox(err)); }
        } }, 'Rotate'),
        confirmButton('Revoke now', 'Confirm revoke', async () => {
          try { await api('POST', '/v1/master-keys/' + encodeURIComponent(k.id) + '/revoke', { idempotency_key: idempotencyKey() }); go('#/keys'); }
          catch (err) { clear(flash); flash.append(errorBox(err)); }
        })])]);
    panel.append(h('p.muted', {}, 'Rotate = create a new master key, then revoke this one after the grace period below.'),
      h('div.filters', {}, h('label', {}, 'Grace period for rotation (seconds, up to 30 days)', grace)),
      flash, table(['Id', 'Label', 'Status', 'Expires', 'Created', 'Actions'], rows), moreNote(page), h('h3', {}, 'Create a master key'), form);
    return panel;
  }

  function publishableKeysPanel(page) {
    const panel = h('div.panel', { id: 'publishable-keys' }, h('h2', {}, 'Publishable keys'));
    const flash = h('div');
    const appId = h('input', { type: 'text', name: 'app_id', required: true, placeholder: 'com.example.app', spellcheck: 'false' });
    const platform = h('select', { name: 'platform' }, h('option', { value: 'ios' }, 'ios'), h('option', { value: 'android' }, 'android'));
    const label = h('input', { type: 'text', name: 'label', maxlength: '200' });
    const create = async (body, note) => {
      clear(flash);
      try {
        const k = await api('POST', '/v1/publishable-keys', Object.assign({ idempotency_key: idempotencyKey() }, body));
        panelAfterCreate(panel, secretBox('New publishable key ' + k.id, k.credential, note));
      } catch (err) { flash.append(errorBox(err)); }
    };
    const form = h('form.inline', { 'aria-label': 'Create a publishable key', onsubmit: async (ev) => {
      ev.preventDefault();
      const body = { app_id: appId.value.trim(), platform: platform.value };
      if (label.value.trim()) body.label = label.value.trim();
      await create(body);
    } }, h('label', {}, 'App id (bundle id / package name)', appId), h('label', {}, 'Platform', platform), h('label', {}, 'Label', label),
      h('button', { type: 'submit', class: 'create-publishable-key' }, 'Create publishable key'));
    const rows = page.data.map(k => [code(k.id), dash(k.app_id), dash(k.platform), dash(k.label), statusBadge(k.status), when(k.created_at),
      h('td.actions', { 'data-key': k.id }, k.status === 'revoked' ? '—' : [
        h('button.secondary', { type: 'button', onclick: () => create({ app_id: k.app_id, platform: k.platform, label: ((k.label || k.id) + ' (rotated)').slice(0, 200) },
          `${k.id} keeps working until you revoke it: ship the new key in your app first.`) }, 'Rotate'),
        confirmButton('Revoke', 'Confirm revoke', async () => {
          try { await api('POST', '/v1/publishable-keys/' + encodeURIComponent(k.id) + '/revoke', { idempotency_key: idempotencyKey() }); go('#/keys'); }
          catch (err) { clear(flash); flash.append(errorBox(err)); }
        })])]);
    panel.append(flash, table(['Id', 'App id', 'Platform', 'Label', 'Status', 'Created', 'Actions'], rows, 'No publishable keys yet.'), moreNote(page),
      h('h3', {}, 'Create a publishable key'), form);
    return panel;
  }

  // ---- audit log -----------------------------------------------------------------------------

  async function viewAudit(params) {
    const cursor = params.get('cursor') || '';
    const page = await api('GET', '/v1/audit-events' + query({ limit: 50, cursor }));
    const rows = page.data.map(e => [when(e.created_at), code(e.actor_id),
      h('span', {}, h('strong', {}, e.action), e.details && Object.keys(e.details).length ? h('div', {}, h('code.wrap.muted', {}, JSON.stringify(e.details))) : null),
      h('span', {}, dash(e.object_type), ' ', code(e.object_id)), code(e.request_id)]);
    return h('div', {}, h('h1', { tabindex: '-1' }, 'Audit log'), h('p.muted', {}, 'Every admin action, newest first.'),
      table(['When', 'Who (key id)', 'Action and details', 'Object', 'Request id'], rows, 'No admin actions yet.'),
      h('div.pager', {}, cursor ? h('button.secondary', { type: 'button', onclick: () => go('#/audit') }, 'Newest') : null,
        page.next_cursor ? h('button', { type: 'button', class: 'next-page', onclick: () => go('#/audit' + query({ cursor: page.next_cursor })) }, 'Older events') : null));
  }

  // ---- webhooks ------------------------------------------------------------------------------

  function webhookUnavailable(err) {
    return err instanceof ApiError && err.status === 404 && !/webhook endpoint/i.test(err.message)
      ? 'This server does not serve webhook endpoints (GET /v1/webhook-endpoints answered 404).' : null;
  }
  async function viewWebhooks() {
    const out = h('div', {}, h('h1', { tabindex: '-1' }, 'Webhooks'));
    let page;
    try { page = await api('GET', '/v1/webhook-endpoints?limit=100'); }
    catch (err) { out.append(errorBox(err, webhookUnavailable(err))); return out; }
    const panel = h('div.panel', { id: 'webhook-endpoints' }, h('h2', {}, 'Endpoints'));
    const flash = h('div');
    const grace = h('input', { type: 'number', name: 'grace', min: '0', value: '86400' });
    const url = h('input', { type: 'url', name: 'url', required: true, placeholder: 'https:// address of your receiver', spellcheck: 'false' });
    const events = h('input', { type: 'text', name: 'events', value: '*', spellcheck: 'false' });
    const description = h('input', { type: 'text', name: 'description' });
    const act = async (fn) => { clear(flash); try { await fn(); } catch (err) { flash.append(errorBox(err)); } };
    const form = h('form.inline', { 'aria-label': 'Add a webhook endpoint', onsubmit: (ev) => {
      ev.preventDefault();
      act(async () => {
        const body = { url: url.value.trim(), events: splitIds(events.value), idempotency_key: idempotencyKey() };
        if (description.value.trim()) body.description = description.value.trim();
        const we = await api('POST', '/v1/webhook-endpoints', body);
        const box = secretBox('Signing secret of ' + we.id, we.secret);
        clear(flash); flash.append(box); box.querySelector('input').focus();
      });
    } }, h('label', {}, 'URL', url), h('label', {}, 'Events (space-separated, * for all)', events), h('label', {}, 'Description', description),
      h('button', { type: 'submit', class: 'create-webhook' }, 'Add endpoint'));
    const base = id => '/v1/webhook-endpoints/' + encodeURIComponent(id);
    const rows = page.data.map(we => [link('#/webhooks/' + encodeURIComponent(we.id), we.id), code(we.url), (we.events || []).join(' '),
      h('span', {}, statusBadge(we.status), we.disabled_reason ? [' ', h('span.muted', {}, we.disabled_reason)] : null), dash(we.description), when(we.created_at),
      h('td.actions', { 'data-endpoint': we.id },
        h('button.secondary', { type: 'button', onclick: () => act(async () => {
          await api('PATCH', base(we.id), { status: we.status === 'enabled' ? 'disabled' : 'enabled' }); go('#/webhooks');
        }) }, we.status === 'enabled' ? 'Disable' : 'Enable'),
        h('button.secondary', { type: 'button', onclick: () => act(async () => {
          await api('POST', base(we.id) + '/test', { idempotency_key: idempotencyKey() });
          flash.append(h('p.notice', { role: 'status' }, 'A webhook.test event was sent to ' + we.url + '; see its deliveries.'));
        }) }, 'Send test'),
        h('button.secondary', { type: 'button', onclick: () => act(async () => {
          const seconds = Math.max(0, parseInt(grace.value, 10) || 0);
          const res = await api('POST', base(we.id) + '/rotate-secret', { expires_in_seconds: seconds, idempotency_key: idempotencyKey() });
          flash.append(secretBox('New signing secret of ' + we.id, res.secret, `The old secret keeps signing for ${seconds} seconds.`));
        }) }, 'Rotate secret'),
        confirmButton('Delete', 'Confirm delete', () => act(async () => { await api('DELETE', base(we.id)); go('#/webhooks'); })))]);
    panel.append(flash, table(['Endpoint', 'URL', 'Events', 'Status', 'Description', 'Created', 'Actions'], rows, 'No webhook endpoints yet.'),
      h('div.filters', {}, h('label', {}, 'Grace period for secret rotation (seconds)', grace)), h('h3', {}, 'Add an endpoint'), form);
    out.append(panel);
    return out;
  }

  async function viewWebhook(id, params) {
    const cursor = params.get('cursor') || '';
    const base = '/v1/webhook-endpoints/' + encodeURIComponent(id);
    const out = h('div', {}, h('p', {}, link('#/webhooks', '\u2190 Webhooks')), h('h1', { tabindex: '-1' }, 'Webhook endpoint ', h('code', {}, id)));
    let we, page;
    try { [we, page] = await Promise.all([api('GET', base), api('GET', base + '/deliveries' + query({ limit: 50, cursor }))]); }
    catch (err) { out.append(errorBox(err, webhookUnavailable(err))); return out; }
    out.append(h('div.panel', {}, kv([['URL', code(we.url)], ['Events', (we.events || []).join(' ')], ['Status', statusBadge(we.status)],
      ['Description', dash(we.description)], ['Created', when(we.created_at)]])));
    const rows = page.data.map(d => [code(d.event_id), String(d.attempt), d.status_code === null || d.status_code === undefined ? '—' : String(d.status_code),
      d.error ? h('span.failure', {}, d.error) : '—', d.duration_ms === null || d.duration_ms === undefined ? '—' : d.duration_ms + ' ms', when(d.delivered_at)]);
    out.append(h('div.panel', {}, h('h2', {}, 'Deliveries, newest first'),
      table(['Event', 'Attempt', 'HTTP status', 'Error', 'Duration', 'When'], rows, 'No delivery attempts yet.'),
      h('div.pager', {}, cursor ? h('button.secondary', { type: 'button', onclick: () => go('#/webhooks/' + encodeURIComponent(id)) }, 'Newest') : null,
        page.next_cursor ? h('button', { type: 'button', onclick: () => go('#/webhooks/' + encodeURIComponent(id) + query({ cursor: page.next_cursor })) }, 'Older deliveries') : null)));
    return out;
  }

  // ---- start ---------------------------------------------------------------------------------

  document.getElementById('skip').addEventListener('click', () => {
    const target = main.querySelector('h1') || main;
    target.focus();
  });
  document.getElementById('sign-out').addEventListener('click', () => {
    sessionStorage.removeItem(KEY_SLOT);
    location.hash = '#/overview';
    render();
  });
  window.addEventListener('hashchange', render);
  render();
})();
