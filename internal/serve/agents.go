package serve

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
)

// agentName is what an agent served beside the main one may be called: a
// task queue name that delegation.agents can name too.
var agentName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

// ParseAgents reads --agent values (name=dir) into Config.Agents, checking
// each name and that each folder exists.
func ParseAgents(values []string, mainDir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, dir, ok := strings.Cut(v, "=")
		if !ok || dir == "" || !agentName.MatchString(name) {
			return nil, fmt.Errorf("--agent %q: want name=folder, the name 1-40 lowercase letters, digits, - or _ (it is the agent's task queue)", v)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--agent %q: agent %s is named twice", v, name)
		}
		abs, err := checkAgent(name, dir, mainDir)
		if err != nil {
			return nil, fmt.Errorf("--agent %q: %w", v, err)
		}
		out[name] = abs
	}
	return out, nil
}

// CheckAgents checks agents (name → folder) as ParseAgents checks --agent
// values, and returns them with absolute folders.
func CheckAgents(agents map[string]string, mainDir string) (map[string]string, error) {
	if agents == nil {
		return nil, nil
	}
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		abs, err := checkAgent(name, agents[name], mainDir)
		if err != nil {
			return nil, fmt.Errorf("agent %q: %w", name, err)
		}
		out[name] = abs
	}
	return out, nil
}

// checkAgent checks one agent's name and folder (not the main agent's).
func checkAgent(name, dir, mainDir string) (string, error) {
	if dir == "" || !agentName.MatchString(name) {
		return "", errors.New("an agent's name is 1-40 lowercase letters, digits, - or _ (it is the agent's task queue); its folder must be named")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s is not a folder", dir)
	}
	if main, err := filepath.Abs(mainDir); err == nil && main == abs {
		return "", errors.New("that is the main agent's folder; name another agent's")
	}
	return abs, nil
}

// startAgents starts a worker for each of Config.Agents on client c, after
// the main worker (whose tool sandbox they share). The definition of each
// must load; a problem names the agent. stop stops them all.
func (p *Parts) startAgents(ctx context.Context, c client.Client) (stop func(), err error) {
	var workers []sdkworker.Worker
	var parts []*Parts
	stop = func() {
		for _, w := range workers {
			w.Stop()
		}
		for _, pp := range parts {
			pp.Close()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Config.Agents)) {
		pp, w, err := p.startAgent(ctx, c, name, p.Config.Agents[name])
		if pp != nil {
			parts = append(parts, pp)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		workers = append(workers, w)
		p.Config.Logger.Info("worker started", "agent", name, "task_queue", name, "dir", p.Config.Agents[name])
	}
	return stop, nil
}

func (p *Parts) startAgent(ctx context.Context, c client.Client, name, dir string) (*Parts, sdkworker.Worker, error) {
	loader, err := workspace.NewLoader(dir, "")
	if err != nil {
		return nil, nil, err
	}
	loader.Extra = append(loader.Extra, p.Config.Tools...)
	// The main agent's environment (and its model clients' keys).
	loader.Getenv = p.Loader.Getenv
	loader.Sandbox = p.Sandbox
	loader.SetOthers(p.walls[name])
	cfg := p.Config
	cfg.Dir, cfg.AgentDir, cfg.TaskQueue, cfg.Agents = dir, "", name, nil
	// A worker beside the main one's, on its client: no ingress, no
	// tracing or Temporal of its own.
	cfg.Roles, cfg.Temporal, cfg.Listener = Roles{Worker: true}, Temporal{}, nil
	cfg.TracerProvider, cfg.TracingEnv = nil, nil
	// Its channels: their repliers answer its turns, their tools are its.
	chans, err := p.channelsOf(ctx, loader, name)
	if err != nil {
		loader.Close()
		return nil, nil, err
	}
	for _, ch := range chans {
		loader.Extra = append(loader.Extra, ch.Tools...)
	}
	with := p.seams // the main worker's seams (repliers, interceptors, tuning)
	with.Store, with.Feed, with.Loader, with.Models, with.Activities, with.Channels = p.Store, p.Feed, loader, p.Models, nil, chans
	pp, err := Assemble(ctx, cfg, with)
	if err != nil {
		loader.Close()
		return nil, nil, err
	}
	pp.closers = append(pp.closers, loader.Close)
	pp.walls = map[string][]tools.Protected{"": p.walls[name]}
	if err := pp.reconcileSchedules(ctx, c, p.warn, name); err != nil {
		return pp, nil, err
	}
	w, err := pp.StartWorker(ctx, c)
	return pp, w, err
}

// agentIngresses returns the HTTP server of the main agent d with auth,
// and under it (ingress.Server.Agents) one for each of Config.Agents at
// /agents/<name>/. Alone, the main agent serves sessions by their names, as
// always; beside others, each agent's sessions are its own (scopedAgent)
// and a principal may be limited to some agents.
func (p *Parts) agentIngresses(d *durable.Agent, auth HTTPAuth) *ingress.Server {
	main := taskQueueOr(p.Config.TaskQueue)
	var serving agent.Agent = d
	var owners ingress.Owners = storeOwners{store: p.Store, agent: d}
	var reserved []string
	for name := range p.Config.Agents {
		reserved = append(reserved, name+"/")
	}
	slices.Sort(reserved)
	if len(reserved) > 0 {
		sc := &scopedAgent{d: d, name: main, reserved: reserved}
		serving, owners = sc, scopedOwners{owners: owners, scope: sc}
	}
	s := p.authIngress(serving, owners, auth)
	// The web chat (GET /chat/): its links and cookies are signed with a
	// key of this process, shared by every agent's routes.
	s.Chat = ingress.NewChatGate()
	for name := range p.Config.Agents {
		od := *d
		od.TaskQueue = name
		od.WhileBusy = p.agentWhileBusy(name) // its own conversation.whileBusy, not the main agent's
		sc := &scopedAgent{d: &od, name: name, prefix: name + "/"}
		if s.Agents == nil {
			s.Agents = map[string]*ingress.Server{}
		}
		s.Agents[name] = p.authIngress(sc, scopedOwners{owners: storeOwners{store: p.Store, agent: &od}, scope: sc}, auth)
	}
	return s
}

// authIngress is IngressFor(a) with the deployment's authentication: the
// principals (or tokens), session owners, origins and hosts.
func (p *Parts) authIngress(a agent.Agent, owners ingress.Owners, auth HTTPAuth) *ingress.Server {
	s := p.IngressFor(a)
	s.Tokens, s.Principals, s.Owners = auth.Tokens, auth.Principals, owners
	s.AllowedOrigins = p.Config.AllowedOrigins
	s.AllowedHosts, s.AnyHost = p.Config.hostPolicy(auth.Host)
	return s
}

// agentWhileBusy is the conversation.whileBusy of agent name's definition
// ("" when it sets none or does not load: queue).
func (p *Parts) agentWhileBusy(name string) string {
	loader, err := workspace.NewLoader(p.Config.Agents[name], "")
	if err != nil {
		return ""
	}
	defer loader.Close()
	loader.Getenv = p.getenv()
	def, err := loader.Load(context.Background())
	if err != nil {
		return ""
	}
	return def.Config.Conversation.WhileBusy
}

// agentDoors are the channels of one agent on this ingress ("" name: the
// main agent's).
type agentDoors struct {
	name  string
	chans []*channels.Channel
	// invokeOff: the agent has channels and its fastagent.yaml does not
	// keep POST /invoke (http: {invoke: true}).
	invokeOff bool
}

// loadAgentDoors reads the enabled channels (channels/*.yaml) of each of
// Config.Agents, for their doors and long connections on this ingress. A
// channel file that does not load names its agent.
func (p *Parts) loadAgentDoors(ctx context.Context) ([]agentDoors, error) {
	getenv := p.getenv()
	var out []agentDoors
	for _, name := range slices.Sorted(maps.Keys(p.Config.Agents)) {
		loader, err := workspace.NewLoader(p.Config.Agents[name], "")
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		loader.Getenv = getenv
		chans, err := p.channelsOf(ctx, loader, name)
		var def *workspace.Definition
		if err == nil {
			def, err = loader.Load(ctx)
		}
		loader.Close()
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		if len(chans) > 0 {
			out = append(out, agentDoors{name: name, chans: chans, invokeOff: invokeOffFor(def, chans)})
		}
	}
	return out, nil
}

// channelsOf loads the enabled channels of the agent loader reads, with
// the deployment's environment holding their secrets.
func (p *Parts) channelsOf(ctx context.Context, loader *workspace.Loader, name string) ([]*channels.Channel, error) {
	def, err := loader.Load(ctx)
	if err != nil {
		return nil, err
	}
	chans, err := channels.Load(def.Workspace.Channels(), p.getenv())
	if err != nil {
		return nil, err
	}
	channels.DefaultWhileBusy(chans, def.Config.Conversation.WhileBusy)
	if err := p.confineDoors(ctx, chans, name, def.Workspace); err != nil {
		return nil, err
	}
	return chans, nil
}

func (p *Parts) getenv() func(string) string {
	if p.Config.Getenv != nil {
		return p.Config.Getenv
	}
	return os.Getenv
}

// forAgent serves h with the request's context scoped to agent name
// (channels.ForAgent).
func forAgent(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(channels.ForAgent(r.Context(), name)))
	})
}

// scopedAttacher attaches to the sessions of agent scope by the names its
// doors give them.
type scopedAttacher struct {
	att   channels.Attacher
	scope string
}

func (s scopedAttacher) Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error) {
	return s.att.Attach(ctx, workflows.ScopedSession(s.scope, session), key)
}
