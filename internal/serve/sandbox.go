package serve

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/workspace"
)

// SandboxSpec is what the tool sandbox of one process needs to know
// beyond the definition: the paths no tool may read and the addresses no
// tool may reach.
type SandboxSpec struct {
	// StateDir and TokensFile are hidden from tools wherever they are.
	StateDir   string
	TokensFile string
	// StoreFile is the SQLite session store's file, wherever it is (it
	// holds every session's transcript): hidden with its -wal, -shm and
	// -journal files.
	StoreFile string
	// ControlPlane are host:port (or host) addresses tools must never reach
	// even with the network on: the Temporal frontend, the Web UI, the
	// ingress, metrics, the store, the feed. Loopback, link-local and
	// private addresses are refused anyway.
	ControlPlane []string
	Getenv       func(string) string
}

// OpenSandbox opens the tool sandbox for def: the mechanism from
// FASTAGENT_SANDBOX or tools.sandbox, the hidden paths, the egress policy.
// It never fails to return one; its Status says what it enforces or why no
// tool will run.
func OpenSandbox(def *workspace.Definition, spec SandboxSpec) (*sandbox.Sandbox, error) {
	getenv := spec.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	mode, err := sandbox.FromEnv(getenv, def.Config.ToolPolicy.Sandbox)
	if err != nil {
		return nil, err
	}
	allow, err := egress.ParsePrefixes(def.Config.ToolPolicy.NetworkAllow)
	if err != nil {
		return nil, fmt.Errorf("tools.networkAllow: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	deny, derr := egress.ParseDests(ctx, spec.ControlPlane)
	hidden := []string{spec.StateDir}
	if spec.TokensFile != "" {
		hidden = append(hidden, spec.TokensFile)
	}
	if spec.StoreFile != "" {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			hidden = append(hidden, spec.StoreFile+suffix)
		}
	}
	sb := sandbox.Open(sandbox.Config{Mode: mode, Hidden: hidden, Egress: egress.Policy{Deny: deny, Allow: allow}})
	return sb, derr
}

// LogSandbox reports the sandbox at startup: what it enforces, that tools
// run unconfined (a warning on every start), or why no tool will run.
func LogSandbox(p *Parts, st sandbox.Status) {
	log := p.Config.Logger
	switch st.Mode {
	case "":
		log.Error("no tool will run: "+st.Error, "landlock_abi", st.LandlockABI)
		p.warn("tool sandbox unavailable — " + st.Error)
	case sandbox.Off:
		p.warn("tools.sandbox is off: " + st.Warning)
	default:
		log.Info("tool sandbox", "mechanism", st.Mode, "landlock_abi", st.LandlockABI, "enforces", strings.Join(st.Enforces, "; "))
	}
}

// controlPlane lists this process's own addresses that tools must not
// reach: the ingress, the metrics listener, the store and the feed (their
// hosts, from the DSNs), beside what the caller named.
func (p *Parts) controlPlane() []string {
	c := p.Config
	out := append([]string{}, c.ControlPlane...)
	out = append(out, net.JoinHostPort(orLoopback(c.HTTPHost), strconv.Itoa(c.HTTPPort)))
	if c.MetricsAddr != "" {
		out = append(out, c.MetricsAddr)
	}
	out = append(out, dsnHosts(c.Store)...)
	if c.Feed != "inprocess" { // the process's own bus: no host
		out = append(out, dsnHosts(c.Feed)...)
	}
	return out
}

// dsnHosts are the host:port addresses a store or feed DSN names: every URL
// of a comma-separated list (NATS takes several servers), or every host and
// hostaddr of a PostgreSQL key=value DSN with its port (default 5432).
// Unix sockets and files name none.
func dsnHosts(dsn string) []string {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return nil
	}
	if !strings.Contains(dsn, "://") && strings.Contains(dsn, "=") {
		return keyValueHosts(dsn)
	}
	var out []string
	for _, part := range strings.Split(dsn, ",") {
		part = strings.TrimSpace(part)
		if part != "" && !strings.Contains(part, "://") {
			part = "nats://" + part // a bare host:port in a server list
		}
		if u, err := url.Parse(part); err == nil && u.Host != "" {
			out = append(out, u.Host)
		}
	}
	return out
}

// keyValueHosts reads host, hostaddr and port of a PostgreSQL key=value
// DSN (values may be single-quoted; hosts and ports may be lists).
func keyValueHosts(dsn string) []string {
	kv := map[string]string{}
	for rest := dsn; ; {
		rest = strings.TrimLeft(rest, " \t\n")
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		after = strings.TrimLeft(after, " ")
		var v string
		if strings.HasPrefix(after, "'") {
			end := strings.Index(after[1:], "'")
			if end < 0 {
				v, rest = after[1:], ""
			} else {
				v, rest = after[1:1+end], after[2+end:]
			}
		} else {
			v, rest, _ = strings.Cut(after, " ")
		}
		kv[strings.TrimSpace(k)] = v
		if rest == "" {
			break
		}
	}
	ports := strings.Split(kv["port"], ",")
	port := func(i int) string {
		if i < len(ports) && strings.TrimSpace(ports[i]) != "" {
			return strings.TrimSpace(ports[i])
		}
		if len(ports) == 1 && strings.TrimSpace(ports[0]) != "" {
			return strings.TrimSpace(ports[0])
		}
		return "5432"
	}
	var out []string
	for _, key := range []string{"host", "hostaddr"} {
		if kv[key] == "" {
			continue
		}
		for i, h := range strings.Split(kv[key], ",") {
			if h = strings.TrimSpace(h); h != "" && !strings.HasPrefix(h, "/") {
				out = append(out, net.JoinHostPort(h, port(i)))
			}
		}
	}
	return out
}

// controlPlaneDests is controlPlane resolved, for webhook callbacks; an
// address that does not resolve is left out (and logged).
func (p *Parts) controlPlaneDests(ctx context.Context) []egress.Dest {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	deny, err := egress.ParseDests(ctx, p.controlPlane())
	if err != nil && p.Config.Logger != nil {
		p.Config.Logger.Warn("webhook callbacks: part of the control plane did not resolve; it is not refused by name", "error", err)
	}
	return deny
}

func orLoopback(host string) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1"
	}
	return host
}

// openSandbox opens the worker's tool sandbox once and gives it to the
// loader; the ingress reports its status on /health?details.
func (p *Parts) openSandbox(ctx context.Context) error {
	if p.Sandbox != nil {
		return nil
	}
	def, err := p.Loader.Load(ctx)
	if err != nil {
		return err
	}
	var storeFile string
	if f, ok := p.Store.(interface{ Path() string }); ok {
		storeFile = f.Path() // a SQLite store, in the state dir or not
	}
	sb, err := OpenSandbox(def, SandboxSpec{StateDir: p.Config.StateDir, TokensFile: p.Config.TokensFile, StoreFile: storeFile, //nolint:contextcheck // the sandbox helper lives with the worker, not with this call
		ControlPlane: p.controlPlane(), Getenv: p.Config.Getenv})
	if sb == nil {
		return err
	}
	if err != nil {
		p.warn("tool network deny list: " + err.Error())
	}
	p.Sandbox, p.ownSandbox = sb, true
	p.Loader.Sandbox = sb
	LogSandbox(p, sb.Status())
	return nil
}

// protectAgents makes the secrets files and state dirs of every agent this
// process serves (the main one and Config.Agents), owner-only, before any
// tool runs, and gives each agent's loader what no tool of it may touch
// beyond its own rules: every other agent's rules, secrets files and state
// dirs, and the worker's state dir and tokens file (SetOthers). Agents
// share one worker and one tool sandbox; without this, one agent's tools
// read another's .env.
func (p *Parts) protectAgents() error {
	if p.walls == nil {
		wss := map[string]workspace.Workspace{"": workspace.Resolve(p.Loader.Workspace())}
		for name, dir := range p.Config.Agents {
			wss[name] = workspace.Resolve(workspace.Workspace{Dir: dir})
		}
		for _, ws := range wss {
			if err := workspace.EnsureSecrets(ws); err != nil {
				return err
			}
		}
		var worker []tools.Protected
		for _, f := range []string{p.Config.StateDir, p.Config.TokensFile} {
			if f != "" {
				abs, err := filepath.Abs(f)
				if err != nil {
					return err
				}
				worker = append(worker, tools.Protected{Path: abs, Reason: "it holds the worker's state or tokens", Secret: true, IfExists: true})
			}
		}
		walls := map[string][]tools.Protected{}
		for name := range wss {
			list := append([]tools.Protected(nil), worker...)
			for other, ws := range wss {
				if other != name {
					list = append(list, workspace.OthersPaths(ws)...)
				}
			}
			walls[name] = list
		}
		p.walls = walls
	}
	p.Loader.SetOthers(p.walls[""])
	return nil
}

// confineDoors gives the doors of chans that start processes
// (channels.Confined: GitHub's executable policy) the tool sandbox —
// opened here when this process has none yet, an ingress without a worker
// — and the protected list of the agent they belong to (name, "" the main
// one; ws its workspace): its own rules and secrets, and every other
// agent's and the worker's.
func (p *Parts) confineDoors(ctx context.Context, chans []*channels.Channel, name string, ws workspace.Workspace) error {
	var need []channels.Confined
	for _, ch := range chans {
		if c, ok := ch.Door.(channels.Confined); ok && c.NeedsSandbox() {
			need = append(need, c)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if err := p.protectAgents(); err != nil {
		return err
	}
	if err := p.openSandbox(ctx); err != nil {
		return err
	}
	list := append(workspace.ProtectedPaths(workspace.Resolve(ws), false), p.walls[name]...)
	for _, c := range need {
		if err := p.checkExecutables(c.Executables(), list); err != nil {
			return err
		}
		c.Confine(p.Sandbox, list)
	}
	return nil
}

// checkExecutables refuses a file a door executes (GitHub's executable
// policy, which decides who starts a turn) that the tools of an agent this
// process serves could rewrite: inside a workspace but outside the rule
// folders (channels/, tools/) that protected, the agent's list, keeps
// read-only.
func (p *Parts) checkExecutables(exes []string, protected []tools.Protected) error {
	writable := []string{p.Loader.Workspace().Dir}
	for _, dir := range p.Config.Agents {
		writable = append(writable, dir)
	}
	for _, exe := range exes {
		real, err := filepath.EvalSymlinks(exe)
		if err != nil {
			return fmt.Errorf("policy.exec %s: %w", exe, err)
		}
		inRules := false
		for _, pr := range protected {
			if r, err := filepath.EvalSymlinks(pr.Path); err == nil && !pr.Secret && (real == r || strings.HasPrefix(real, r+string(filepath.Separator))) {
				inRules = true
			}
		}
		for _, w := range writable {
			r, err := filepath.EvalSymlinks(w)
			if err != nil || inRules || !strings.HasPrefix(real, r+string(filepath.Separator)) {
				continue
			}
			return fmt.Errorf("policy.exec %s lies in the workspace %s, where the agent's own tools could rewrite it (and so decide who starts a turn): "+
				"move it into channels/ next to the channel file (exec: ./name), or outside the workspace", exe, w)
		}
	}
	return nil
}
