package plugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/internal/codec"
)

// GuardName is the Guard's plugin name.
const GuardName = "fastagent-activities"

// Guard is the codec of activities registered by hand (the public
// activities.Register) rather than by the plugin: like the plugin, it sets
// the codec's data and failure converters on every client made with it,
// and it tells Register whether the worker registered on runs on such a
// client — a worker whose client lacks the codec could not decode the
// sessions' encrypted payloads, and would write its results in clear.
type Guard struct {
	*temporal.SimplePlugin
	codec *codec.Codec
	// clientConfigured is set once a client was made with the guard.
	clientConfigured atomic.Bool
	// aliases stand for the guard in a worker's Options.Plugins (the
	// public activities.Set embedding it).
	aliases []any

	// regMu serializes Registering; expect is the activity name it waits
	// for, last the worker instance that registered it.
	regMu sync.Mutex

	mu      sync.Mutex
	workers map[string]*workerState
	expect  string
	last    string
}

// NewGuard returns the guard of cdc (nil: no codec; it configures nothing
// and Registering checks nothing).
func NewGuard(cdc *codec.Codec) (*Guard, error) {
	g := &Guard{codec: cdc, workers: map[string]*workerState{}}
	so := temporal.SimplePluginOptions{
		Name:            GuardName,
		ConfigureClient: g.configureClient,
		ConfigureWorker: g.configureWorker,
		RunContextAfter: g.stop,
	}
	if cdc != nil {
		so.DataConverter = cdc.DataConverter()
		so.FailureConverter = cdc.FailureConverter()
		so.ClientInterceptors = append(so.ClientInterceptors, cdc.Marker())
	}
	sp, err := temporal.NewSimplePlugin(so)
	if err != nil {
		return nil, err
	}
	g.SimplePlugin = sp
	return g, nil
}

// Codec is the guard's codec (nil: none).
func (g *Guard) Codec() *codec.Codec { return g.codec }

// Alias makes x (a value embedding the guard) stand for it in a worker's
// Options.Plugins.
func (g *Guard) Alias(x any) { g.aliases = append(g.aliases, x) }

func (g *Guard) is(x sdkworker.Plugin) bool {
	if x == nil {
		return false
	}
	if gg, ok := x.(*Guard); ok {
		return gg == g
	}
	return slices.Contains(g.aliases, any(x))
}

func (g *Guard) configureClient(context.Context, client.PluginConfigureClientOptions) error {
	g.clientConfigured.Store(true)
	return nil
}

// configureWorker notes each worker made with the guard (once, though it
// may be on both the worker's client and its options) and watches its
// activity registrations.
func (g *Guard) configureWorker(_ context.Context, o sdkworker.PluginConfigureWorkerOptions) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := o.WorkerInstanceKey
	if w, seen := g.workers[key]; seen {
		w.configured++
		return nil
	}
	g.workers[key] = &workerState{queue: o.TaskQueue, configured: 1, inOptions: slices.ContainsFunc(o.WorkerOptions.Plugins, g.is)}
	reg := o.WorkerRegistryOptions
	prev := reg.OnRegisterActivity
	reg.OnRegisterActivity = func(fn any, ro activity.RegisterOptions) {
		g.mu.Lock()
		if g.expect != "" && ro.Name == g.expect {
			g.last = key
		}
		g.mu.Unlock()
		if prev != nil {
			prev(fn, ro)
		}
	}
	return nil
}

func (g *Guard) stop(_ context.Context, o temporal.SimplePluginRunContextAfterOptions) {
	g.mu.Lock()
	delete(g.workers, o.InstanceKey)
	g.mu.Unlock()
}

// ErrClientWithoutCodec is Registering's refusal.
var ErrClientWithoutCodec = errors.New("payload codec keys are configured, but this worker's Temporal client was not made with the activity set " +
	"(client.Options.Plugins), so it could not decode the sessions' encrypted payloads and would write its results unencrypted: " +
	"make the client with the set as a plugin and the worker from that client; or remove the keys")

// Registering runs register, which registers the activity name on a
// worker, and reports whether that worker's client carries the guard's
// codec: made with the guard (it is on the client, not only in the
// worker's options). Without a codec it checks nothing.
func (g *Guard) Registering(name string, register func()) error {
	if g.codec == nil {
		register()
		return nil
	}
	g.regMu.Lock()
	defer g.regMu.Unlock()
	g.mu.Lock()
	g.expect, g.last = name, ""
	g.mu.Unlock()
	register()
	g.mu.Lock()
	key := g.last
	g.expect, g.last = "", ""
	w := g.workers[key]
	g.mu.Unlock()
	if key == "" || w == nil || !g.clientConfigured.Load() || !w.onClient() {
		return ErrClientWithoutCodec
	}
	return nil
}
