// fastagent web chat: talks to the agent through the HTTP API of the server
// that serves this page (docs/http-api.md). Every text that comes from the
// model, a tool or a person is put on the page with textContent, never as
// HTML.
'use strict';

(function () {
  const root = location.pathname.replace(/chat\/[^/]*$/, ''); // ends in "/"
  const agentName = new URLSearchParams(location.search).get('agent') || '';
  const api = root + (agentName ? 'agents/' + encodeURIComponent(agentName) + '/' : '');
  const $ = (id) => document.getElementById(id);

  // el builds an element; text goes in as textContent only.
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function csrf() {
    for (const c of document.cookie.split(';')) {
      const [k, v] = c.trim().split('=');
      if (k === 'fastagent_csrf') return decodeURIComponent(v || '');
    }
    return '';
  }

  function banner(text) {
    const b = $('banner');
    b.textContent = text;
    b.hidden = !text;
  }

  async function call(method, path, body, extra) {
    const headers = Object.assign({ 'X-CSRF-Token': csrf() }, extra || {});
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(api + path, init);
    if (r.status === 401) banner('Your chat session has ended. Open a new link: fastagent chat-link');
    return r;
  }

  async function errorOf(r) {
    try {
      const j = await r.json();
      return (j.error || 'request failed') + (j.code ? ' (' + j.code + ')' : '');
    } catch (e) {
      return 'request failed: HTTP ' + r.status;
    }
  }

  const sessPath = (id) => 'sessions/' + encodeURIComponent(id);

  function compactJSON(v) {
    try {
      return JSON.stringify(v, null, 2);
    } catch (e) {
      return String(v);
    }
  }

  function newSessionID() {
    const d = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
    const r = new Uint8Array(3);
    crypto.getRandomValues(r);
    return 'web-' + d + '-' + Array.from(r, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  // A Turn renders one turn's events into its container.
  class Turn {
    constructor(chat, box) {
      this.chat = chat;
      this.box = box;
      this.steps = new Map(); // step → its text element
      this.lastText = null;
      this.tools = new Map(); // call ID → {details, progress, result, summary}
      this.waits = new Map(); // approval / question ID → box
      this.done = false;
    }

    text(ev) {
      const step = ev.step || 0;
      let t = this.steps.get(step);
      if (!t || t !== this.lastText) {
        t = el('div', 'msg assistant');
        t.dataset.step = String(step);
        this.box.append(t);
        this.steps.set(step, t);
        this.lastText = t;
      }
      t.textContent += ev.delta || '';
    }

    tool(id, name, args) {
      let t = this.tools.get(id);
      if (t) return t;
      const d = el('details', 'tool');
      const summary = el('summary', '', '⚙ ' + name);
      const argsPre = el('pre', 'args', compactJSON(args === undefined ? {} : args));
      const progress = el('div', 'progress');
      const result = el('pre', 'result');
      result.hidden = true;
      d.append(summary, argsPre, progress, result);
      this.box.append(d);
      this.lastText = null;
      t = { details: d, summary, progress, result, name };
      this.tools.set(id, t);
      return t;
    }

    ended(id, isError, content) {
      const t = this.tools.get(id) || this.tool(id, 'tool', {});
      t.progress.textContent = '';
      t.result.hidden = false;
      t.result.textContent = content || '';
      t.summary.textContent = (isError ? '✗ ' : '✓ ') + t.name;
      if (isError) t.details.classList.add('failed');
    }

    approval(ev) {
      if (this.waits.has('a:' + ev.id)) return;
      const b = el('div', 'box approval');
      b.append(el('div', '', 'Approve tool call ' + ev.name + (ev.agent ? ' (sub-agent ' + ev.agent + ')' : '') + '?'));
      b.append(el('pre', '', compactJSON(ev.args)));
      const status = el('div', 'status');
      const buttons = el('div', 'buttons');
      const yes = el('button', 'approve', 'Approve');
      const no = el('button', 'deny danger', 'Deny');
      yes.type = no.type = 'button';
      const decide = async (approve) => {
        yes.disabled = no.disabled = true;
        status.textContent = approve ? 'approving…' : 'denying…';
        const body = { approve };
        if (ev.argsHash) body.argsHash = ev.argsHash;
        if (ev.definitionHash) body.definitionHash = ev.definitionHash;
        const r = await call('POST', sessPath(this.chat.id) + '/approvals/' + encodeURIComponent(ev.id), body);
        if (!r.ok) {
          status.textContent = await errorOf(r);
          yes.disabled = no.disabled = false;
        }
      };
      yes.addEventListener('click', () => decide(true));
      no.addEventListener('click', () => decide(false));
      buttons.append(yes, no);
      b.append(buttons, status);
      this.box.append(b);
      this.lastText = null;
      this.waits.set('a:' + ev.id, { box: b, buttons, status });
    }

    resolved(ev) {
      const w = this.waits.get('a:' + ev.id);
      if (!w) return;
      w.buttons.remove();
      let s = ev.approved ? 'Approved' : 'Denied';
      if (ev.timedOut) s = 'Denied: nobody decided in time';
      if (ev.by) s += ' by ' + ev.by;
      if (ev.reason) s += ': ' + ev.reason;
      w.status.textContent = s;
      w.box.classList.add('decided');
    }

    question(ev) {
      if (this.waits.has('q:' + ev.id)) return;
      const b = el('div', 'box question');
      b.append(el('div', '', (ev.agent ? 'Sub-agent ' + ev.agent + ' asks: ' : 'The agent asks: ') + (ev.question || '')));
      const row = el('div', 'buttons');
      const input = el('input');
      input.type = 'text';
      input.placeholder = 'Your answer';
      const send = el('button', '', 'Answer');
      send.type = 'button';
      const status = el('div', 'status');
      const answer = async () => {
        const text = input.value.trim();
        if (!text) return;
        send.disabled = true;
        const r = await call('POST', sessPath(this.chat.id) + '/answers/' + encodeURIComponent(ev.id), { text });
        if (!r.ok) {
          status.textContent = await errorOf(r);
          send.disabled = false;
        } else {
          status.textContent = 'Answered: ' + text;
          row.remove();
        }
      };
      send.addEventListener('click', answer);
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') answer();
      });
      row.append(input, send);
      b.append(row, status);
      this.box.append(b);
      this.lastText = null;
      this.waits.set('q:' + ev.id, { box: b, buttons: row, status });
    }

    answered(ev) {
      const w = this.waits.get('q:' + ev.id);
      if (!w) return;
      w.buttons.remove();
      if (ev.timedOut) w.status.textContent = 'Nobody answered in time';
      else if (!w.status.textContent) w.status.textContent = 'Answered' + (ev.by ? ' by ' + ev.by : '');
    }

    status(text, cls) {
      this.box.append(el('div', cls || 'status', text));
      this.lastText = null;
    }

    handle(ev) {
      switch (ev.type) {
        case 'text':
          this.text(ev);
          break;
        case 'tool_started':
          this.tool(ev.id, ev.name, ev.args);
          break;
        case 'tool_progress': {
          const t = this.tools.get(ev.callId) || this.tool(ev.callId, ev.tool || 'tool', {});
          let line = ev.message || '';
          if (ev.total) line = '[' + ev.progress + '/' + ev.total + '] ' + line;
          else if (ev.progress) line = '[' + ev.progress + '] ' + line;
          t.progress.textContent = line;
          break;
        }
        case 'tool_ended':
          this.ended(ev.id, ev.isError, ev.content);
          break;
        case 'delegated': {
          const t = this.tools.get(ev.id);
          const sub = ev.event || {};
          if (t && sub.type) {
            let line = sub.type;
            if (sub.type === 'text') line = sub.delta;
            else if (sub.type === 'tool_started') line = 'running ' + sub.name;
            else if (sub.type === 'tool_progress') line = sub.message;
            t.progress.textContent = (ev.agent || 'sub-agent') + ': ' + (line || '');
          }
          break;
        }
        case 'approval_requested':
          this.approval(ev);
          break;
        case 'approval_resolved':
          this.resolved(ev);
          break;
        case 'question_asked':
          this.question(ev);
          break;
        case 'question_answered':
          this.answered(ev);
          break;
        case 'retrying':
          for (const [step, t] of this.steps) {
            if (!ev.step || step === ev.step) t.textContent = '';
          }
          this.status('retrying the model (' + (ev.reason || 'error') + ')…');
          break;
        case 'completed': {
          this.done = true;
          const u = ev.usage;
          this.status('done' + (u ? ' · ' + (u.input + u.output) + ' tokens' : ''), 'status done');
          break;
        }
        case 'failed':
          this.done = true;
          this.status(ev.code === 'aborted' ? 'stopped' : 'failed: ' + (ev.details || ev.code || ''), ev.code === 'aborted' ? 'status done' : 'msg error');
          break;
        default:
          break;
      }
      this.chat.scroll();
    }
  }

  // readSSE calls onEvent with each event of a text/event-stream response.
  async function readSSE(resp, onEvent) {
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value.replace(/\r\n/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let data = '';
        for (const line of frame.split('\n')) {
          if (line.startsWith('data:')) data += line.slice(line.startsWith('data: ') ? 6 : 5);
        }
        if (!data) continue;
        let ev;
        try {
          ev = JSON.parse(data);
        } catch (e) {
          continue;
        }
        onEvent(ev);
      }
    }
  }

  // A Chat is one session's log and its running turn.
  class Chat {
    constructor(id) {
      this.id = id;
      this.log = el('div', 'log');
      this.log.dataset.session = id;
      this.turnKey = '';
      this.running = false;
      this.loaded = false;
    }

    scroll() {
      if (current === this) {
        const l = $('logs');
        l.scrollTop = l.scrollHeight;
      }
    }

    setRunning(on, key) {
      this.running = on;
      if (key !== undefined) this.turnKey = key;
      if (current === this) showControls();
    }

    async stream(resp) {
      const turn = new Turn(this, el('div', 'turn'));
      this.log.append(turn.box);
      this.setRunning(true, resp.headers.get('Idempotency-Key') || '');
      refreshSessions(); // a new session is listed as soon as its turn starts
      try {
        await readSSE(resp, (ev) => turn.handle(ev));
      } catch (e) {
        turn.status('the stream broke: ' + e.message, 'msg error');
      }
      if (!turn.done) turn.status('the stream ended before the turn did', 'status');
      this.setRunning(false);
      if (current === this) $('title').textContent = this.id;
      refreshSessions();
    }

    async send(text) {
      this.log.append(el('div', 'msg user', text));
      this.scroll();
      this.setRunning(true, '');
      let r;
      try {
        r = await call('POST', 'invoke', { session: this.id, text }, { 'Resume-Within': '15s' });
      } catch (e) {
        this.log.append(el('div', 'msg error', 'could not send: ' + e.message));
        this.setRunning(false);
        return;
      }
      if (!r.ok) {
        this.log.append(el('div', 'msg error', await errorOf(r)));
        this.setRunning(false);
        return;
      }
      await this.stream(r);
    }

    async stop() {
      if (!this.running) return;
      const r = await call('POST', sessPath(this.id) + '/abort', this.turnKey ? { turn: this.turnKey, reason: 'stopped in the web chat' } : {});
      if (!r.ok && r.status !== 409) this.log.append(el('div', 'msg error', await errorOf(r)));
    }

    // load shows the stored transcript, then follows a running turn.
    async load() {
      this.loaded = true;
      const r = await call('GET', sessPath(this.id) + '/transcript');
      if (!r.ok) {
        this.log.append(el('div', 'msg error', await errorOf(r)));
        return;
      }
      const t = await r.json();
      let turn = null;
      for (const e of t.entries || []) {
        const m = e.message;
        if (e.type !== 'message' || !m) continue;
        if (m.role === 'user') {
          this.log.append(el('div', 'msg user', m.text || ''));
          turn = null;
        } else if (m.role === 'assistant') {
          if (!turn) {
            turn = new Turn(this, el('div', 'turn'));
            this.log.append(turn.box);
          }
          if (m.text) {
            turn.lastText = null;
            turn.text({ delta: m.text, step: 0 });
          }
          for (const c of m.toolCalls || []) turn.tool(c.id, c.name, c.args);
        } else if (m.role === 'toolResult' && turn) {
          turn.ended(m.toolCallId, m.isError, m.text || '');
        }
      }
      const s = await call('GET', sessPath(this.id));
      if (s.ok) {
        const v = await s.json();
        if (v.running && !this.running) {
          const a = await call('GET', sessPath(this.id) + '/turns/' + encodeURIComponent(v.running) + '/events');
          if (a.ok) await this.stream(a);
        }
      }
    }
  }

  const chats = new Map();
  let current = null;

  function showControls() {
    const busy = current && current.running;
    $('stop').hidden = !busy;
    $('send').disabled = !!busy;
  }

  function open(id, fresh) {
    let c = chats.get(id);
    if (!c) {
      c = new Chat(id);
      chats.set(id, c);
      if (fresh) c.loaded = true;
    }
    current = c;
    $('logs').replaceChildren(c.log);
    $('title').textContent = fresh ? 'New chat · ' + id : id;
    for (const b of document.querySelectorAll('#sessions button')) b.classList.toggle('current', b.dataset.session === id);
    showControls();
    if (!c.loaded) c.load();
    c.scroll();
    $('prompt').focus();
  }

  function when(t) {
    const d = new Date(t);
    return isNaN(d) ? '' : d.toLocaleString();
  }

  async function refreshSessions() {
    const r = await call('GET', 'sessions?limit=50');
    const ul = $('sessions');
    if (!r.ok) {
      if (r.status !== 401) ul.replaceChildren(el('li', 'muted', await errorOf(r)));
      return;
    }
    const j = await r.json();
    const items = (j.sessions || []).map((s) => {
      const li = el('li');
      const b = el('button', '', s.session);
      b.type = 'button';
      b.dataset.session = s.session;
      b.title = s.session;
      b.append(el('span', 'when', when(s.updated) + (s.turns ? ' · ' + s.turns + (s.turns === 1 ? ' turn' : ' turns') : '')));
      if (current && current.id === s.session) b.classList.add('current');
      b.addEventListener('click', () => open(s.session, false));
      li.append(b);
      return li;
    });
    ul.replaceChildren(...items);
  }

  // showWho puts the signed-in principal's name in the header.
  async function showWho() {
    try {
      const r = await fetch(root + 'chat/me', { credentials: 'same-origin', cache: 'no-store' });
      if (!r.ok) return;
      const me = await r.json();
      $('who').textContent = me.principal ? 'signed in as ' + me.principal : '';
    } catch (e) {
      // the header just shows no name
    }
  }

  function init() {
    $('agent').textContent = agentName ? 'agent ' + agentName : '';
    $('new').addEventListener('click', () => open(newSessionID(), true));
    $('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      const p = $('prompt');
      const text = p.value.trim();
      if (!text || !current || current.running) return;
      p.value = '';
      current.send(text);
    });
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $('composer').requestSubmit();
      }
    });
    $('stop').addEventListener('click', () => current && current.stop());
    $('signout').addEventListener('click', async () => {
      await fetch(root + 'chat/logout', { method: 'POST', headers: { 'X-CSRF-Token': csrf() }, credentials: 'same-origin' });
      banner('Signed out. Open a new link to sign in again: fastagent chat-link');
      $('who').textContent = '';
    });
    if (!csrf()) banner('Not signed in. Open a link from: fastagent chat-link');
    showWho();
    open(newSessionID(), true);
    refreshSessions();
  }

  init();
})();
