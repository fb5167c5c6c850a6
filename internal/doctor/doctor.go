// Package doctor is the preflight of a deployment (`fastagent doctor`):
// each thing a worker and an ingress need — Temporal reachable with the
// configured TLS or API key, the namespace, the session search attributes,
// the Worker Deployment's current version, the session store, the live
// feed's stream, the model keys — checked on its own and reported as one
// pass/fail line that says what to do. Fix repairs what the credential
// allows (the search attributes through the operator API, the feed's
// stream); on Temporal Cloud it prints the exact tcld or UI step instead.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/workflows"
)

// Options are what the checks check.
type Options struct {
	// Temporal is how to reach Temporal (TLS, API key, namespace).
	Temporal tclient.Config
	// Deployment is the Worker Deployment the workers join
	// (FASTAGENT_DEPLOYMENT); "" skips that check.
	Deployment string
	// Store is the session store DSN ("" skips the check).
	Store string
	// Feed is the live feed: "inprocess" or "" skips the check, a nats://
	// URL checks its JetStream stream.
	Feed string
	// Models are the "provider/model" specs the agent uses; Getenv reads
	// their keys.
	Models []string
	Getenv func(string) string
	// Fix repairs what can be repaired.
	Fix bool
	// Timeout bounds each check (default 15 s).
	Timeout time.Duration
}

// Result is one check's outcome.
type Result struct {
	Name string
	// Status is Pass, Fail or Skip.
	Status Status
	// Detail says what was found; for a failure, what to do.
	Detail string
}

// Status is a check's outcome.
type Status string

// The statuses.
const (
	Pass Status = "pass"
	Fail Status = "FAIL"
	Skip Status = "skip"
	// Fixed is a failure Fix repaired (the check passes now).
	Fixed Status = "fixed"
)

// Report is every check's result, in order.
type Report []Result

// OK reports whether no check failed.
func (r Report) OK() bool {
	for _, c := range r {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

// Print writes one line per check, then a summary.
func (r Report) Print(w io.Writer) {
	failed := 0
	for _, c := range r {
		fmt.Fprintf(w, "%-5s  %-18s %s\n", c.Status, c.Name, c.Detail)
		if c.Status == Fail {
			failed++
		}
	}
	if failed == 0 {
		fmt.Fprintln(w, "all checks passed")
	} else {
		fmt.Fprintf(w, "%d of %d checks failed\n", failed, len(r))
	}
}

// IsCloud reports whether address is a Temporal Cloud endpoint.
func IsCloud(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	host = strings.ToLower(host)
	return strings.HasSuffix(host, ".tmprl.cloud") || strings.HasSuffix(host, ".api.temporal.io")
}

// Run runs every check.
func Run(ctx context.Context, o Options) Report {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Temporal.Namespace == "" {
		o.Temporal.Namespace = "default"
	}
	var r Report
	r = append(r, o.temporalChecks(ctx)...)
	r = append(r, o.checkStore(ctx), o.checkFeed(ctx), o.checkModels()) //nolint:contextcheck // building a model client calls nothing
	return r
}

// temporalChecks: reachable, namespace, search attributes, deployment.
func (o Options) temporalChecks(ctx context.Context) Report {
	tc := o.Temporal
	auth := "no TLS, no API key"
	switch {
	case tc.APIKey != "" && tc.TLSCertFile != "":
		auth = "API key and mTLS client certificate"
	case tc.APIKey != "" && tc.Plaintext:
		auth = "API key without TLS"
	case tc.APIKey != "":
		auth = "API key over TLS"
	case tc.TLSCertFile != "":
		auth = "mTLS client certificate"
	case tc.TLS || tc.TLSCAFile != "":
		auth = "TLS"
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := tclient.Dial(dctx, tc)
	if err != nil {
		skip := "Temporal is not reachable"
		return Report{
			{Name: "temporal", Status: Fail, Detail: err.Error()},
			{Name: "namespace", Status: Skip, Detail: skip},
			{Name: "search attributes", Status: Skip, Detail: skip},
			{Name: "worker deployment", Status: Skip, Detail: skip},
		}
	}
	defer c.Close()
	r := Report{{Name: "temporal", Status: Pass, Detail: fmt.Sprintf("%s reachable (%s)", tc.Address, auth)}}
	return append(r, o.OnClient(ctx, c)...)
}

// OnClient runs the checks that need Temporal — namespace, search
// attributes, Worker Deployment — on a client that is already connected
// (a worker's, at start).
func (o Options) OnClient(ctx context.Context, c client.Client) Report {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	if o.Temporal.Namespace == "" {
		o.Temporal.Namespace = "default"
	}
	ns := o.checkNamespace(ctx, c)
	if ns.Status == Fail {
		return Report{ns,
			Result{Name: "search attributes", Status: Skip, Detail: "no namespace"},
			Result{Name: "worker deployment", Status: Skip, Detail: "no namespace"}}
	}
	return Report{ns, o.checkSearchAttributes(ctx, c), o.checkDeployment(ctx, c)}
}

func (o Options) checkNamespace(ctx context.Context, c client.Client) Result {
	ns := o.Temporal.Namespace
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	resp, err := c.WorkflowService().DescribeNamespace(cctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &notFound):
		how := "create it: temporal operator namespace create --namespace " + ns
		if IsCloud(o.Temporal.Address) {
			how = "create it in the Temporal Cloud UI (Namespaces → Create) or with tcld namespace create, or check TEMPORAL_NAMESPACE (<namespace>.<account>)"
		}
		return Result{Name: "namespace", Status: Fail, Detail: fmt.Sprintf("namespace %s does not exist; %s", ns, how)}
	case err != nil:
		return Result{Name: "namespace", Status: Fail, Detail: fmt.Sprintf("describe namespace %s: %v", ns, err)}
	}
	retention := ""
	if d := resp.GetConfig().GetWorkflowExecutionRetentionTtl(); d != nil {
		retention = fmt.Sprintf(", retention %s", d.AsDuration())
	}
	return Result{Name: "namespace", Status: Pass, Detail: fmt.Sprintf("%s (%s%s)", ns, strings.ToLower(strings.TrimPrefix(resp.GetNamespaceInfo().GetState().String(), "NAMESPACE_STATE_")), retention)}
}

func (o Options) checkSearchAttributes(ctx context.Context, c client.Client) Result {
	const name = "search attributes"
	ns := o.Temporal.Namespace
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	missing, err := sessionstart.Missing(cctx, c, ns)
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: err.Error()}
	}
	if len(missing) == 0 {
		return Result{Name: name, Status: Pass, Detail: strings.Join(workflows.SearchAttributeNames(), ", ") + " registered (Keyword)"}
	}
	if IsCloud(o.Temporal.Address) {
		var sa []string
		for _, m := range missing {
			sa = append(sa, fmt.Sprintf("--search-attribute %s=Keyword", m))
		}
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("missing %s; on Temporal Cloud add them with an account admin's credentials: "+
			"tcld namespace search-attributes add --namespace %s %s (or the Cloud UI: Namespaces → %s → Search Attributes → Add, type Keyword)",
			strings.Join(missing, ", "), ns, strings.Join(sa, " "), ns)}
	}
	if !o.Fix {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("missing %s; run fastagent doctor --fix (or fastagent search-attributes create) to register them", strings.Join(missing, ", "))}
	}
	added, err := sessionstart.Register(cctx, c, ns)
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("missing %s, and registering them failed: %v (the credential needs the operator API: register them as an admin with temporal operator search-attribute create)", strings.Join(missing, ", "), err)}
	}
	return Result{Name: name, Status: Fixed, Detail: "registered " + strings.Join(added, ", ")}
}

func (o Options) checkDeployment(ctx context.Context, c client.Client) Result {
	const name = "worker deployment"
	if o.Deployment == "" {
		return Result{Name: name, Status: Skip, Detail: "workers unversioned (FASTAGENT_DEPLOYMENT unset)"}
	}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	d, err := c.WorkerDeploymentClient().GetHandle(o.Deployment).Describe(cctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("deployment %s has no version yet: start its workers, then fastagent rollout --deployment %s --build-id <their build ID>", o.Deployment, o.Deployment)}
	}
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("describe worker deployment %s: %v", o.Deployment, err)}
	}
	var versions []string
	for _, v := range d.Info.VersionSummaries {
		versions = append(versions, v.Version.BuildID)
	}
	cur := d.Info.RoutingConfig.CurrentVersion
	if cur == nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("deployment %s has no current version (versions: %s), so its workers get no work: fastagent rollout --deployment %s --build-id <build ID>",
			o.Deployment, strings.Join(versions, ", "), o.Deployment)}
	}
	detail := fmt.Sprintf("%s current %s (versions: %s)", o.Deployment, cur.BuildID, strings.Join(versions, ", "))
	if ramp := d.Info.RoutingConfig.RampingVersion; ramp != nil {
		detail += fmt.Sprintf(", ramping %s at %.0f %%", ramp.BuildID, d.Info.RoutingConfig.RampingVersionPercentage)
	}
	return Result{Name: name, Status: Pass, Detail: detail}
}

// checkStore opens the store as a worker does (creating its tables when
// they are missing, as every worker's start would) and reads from it.
func (o Options) checkStore(ctx context.Context) Result {
	const name = "store"
	if o.Store == "" {
		return Result{Name: name, Status: Skip, Detail: "no store configured (FASTAGENT_STORE)"}
	}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st, err := store.Open(cctx, o.Store)
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: err.Error()}
	}
	defer func() { _ = st.Close() }()
	if _, err := st.Entries(cctx, "doctor:probe"); err != nil {
		return Result{Name: name, Status: Fail, Detail: "reachable, but reading its tables failed: " + err.Error()}
	}
	return Result{Name: name, Status: Pass, Detail: fmt.Sprintf("%s reachable, its tables present and readable", redact(o.Store))}
}

// checkFeed checks the NATS feed: reachable, JetStream on, its stream there
// (created by the first worker or ingress; Fix creates it now).
func (o Options) checkFeed(ctx context.Context) Result {
	const name = "feed"
	if o.Feed == "" || o.Feed == "inprocess" {
		return Result{Name: name, Status: Skip, Detail: "in-process feed (worker and ingress in one process)"}
	}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	nc, err := nats.Connect(o.Feed, nats.Name("fastagent-doctor"), nats.Timeout(o.Timeout))
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("NATS at %s: %v", redact(o.Feed), err)}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: err.Error()}
	}
	if _, err := js.AccountInfo(cctx); err != nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("NATS at %s has no JetStream (start nats-server with -js, or jetstream: enabled): %v", redact(o.Feed), err)}
	}
	stream := feed.StreamName(feed.DefaultPrefix)
	info, err := js.Stream(cctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !o.Fix {
			return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("JetStream stream %s does not exist yet (the first worker or ingress creates it; fastagent doctor --fix creates it now)", stream)}
		}
		b, err := feed.NewNATS(o.Feed) //nolint:contextcheck // the feed dials with its own timeout
		if err != nil {
			return Result{Name: name, Status: Fail, Detail: "creating the stream: " + err.Error()}
		}
		_ = b.Close()
		return Result{Name: name, Status: Fixed, Detail: "created JetStream stream " + stream}
	}
	if err != nil {
		return Result{Name: name, Status: Fail, Detail: fmt.Sprintf("JetStream stream %s: %v", stream, err)}
	}
	return Result{Name: name, Status: Pass, Detail: fmt.Sprintf("%s, JetStream stream %s (%s)", redact(o.Feed), stream, strings.ToLower(info.CachedInfo().Config.Storage.String()))}
}

// checkModels checks each model has what its client needs (a key, a valid
// endpoint); it sends no request.
func (o Options) checkModels() Result {
	const name = "model keys"
	if len(o.Models) == 0 {
		return Result{Name: name, Status: Fail, Detail: "no model configured: set model in fastagent.yaml or FASTAGENT_MODEL (e.g. openai/gpt-4o-mini) and its key"}
	}
	var problems, ok []string
	for _, spec := range o.Models {
		if _, err := llm.New(spec, llm.Options{Getenv: o.Getenv}); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		what := spec
		if k := llm.KeyEnv(spec); k != "" && o.Getenv(k) != "" {
			what += " (" + k + " set)"
		}
		ok = append(ok, what)
	}
	if len(problems) > 0 {
		return Result{Name: name, Status: Fail, Detail: strings.Join(problems, "; ")}
	}
	return Result{Name: name, Status: Pass, Detail: strings.Join(ok, ", ")}
}

// redact hides a URL's password or token and a key=value DSN's password.
func redact(s string) string {
	s = passwordKV.ReplaceAllString(s, "${1}xxxxx")
	var parts []string
	for _, p := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			parts = append(parts, p)
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a NATS token
		}
		parts = append(parts, u.String())
	}
	return strings.Join(parts, ",")
}

var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)[^\s]+`)
