package plugin

import (
	"fmt"
	"strings"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/buildinfo"
)

// Versioning places a worker in a Temporal Worker Deployment. With a
// deployment name set, the worker polls as version <Deployment>:<BuildID>
// and every workflow it runs is pinned to that version: a run's history is
// only ever replayed by the code that wrote it. Sessions move to the
// deployment's current version at continue-as-new (see docs/operations.md, "Rollouts").
type Versioning struct {
	// Deployment is the Worker Deployment name (env FASTAGENT_DEPLOYMENT);
	// empty runs the worker unversioned, as in development.
	Deployment string
	// BuildID names this code (env FASTAGENT_BUILD_ID); empty means
	// DefaultBuildID().
	BuildID string

	defaultID string // replaces DefaultBuildID() in tests
}

// VersioningFromEnv reads FASTAGENT_DEPLOYMENT and FASTAGENT_BUILD_ID.
func VersioningFromEnv(getenv func(string) string) Versioning {
	return Versioning{
		Deployment: strings.TrimSpace(getenv("FASTAGENT_DEPLOYMENT")),
		BuildID:    strings.TrimSpace(getenv("FASTAGENT_BUILD_ID")),
	}
}

// Enabled reports whether the worker joins a Worker Deployment.
func (v Versioning) Enabled() bool { return v.Deployment != "" }

// Version returns the deployment version this worker polls as, with the
// build ID defaulted.
func (v Versioning) Version() sdkworker.WorkerDeploymentVersion {
	id := v.BuildID
	if id == "" {
		id = v.defaultID
	}
	if id == "" {
		id = DefaultBuildID()
	}
	return sdkworker.WorkerDeploymentVersion{DeploymentName: v.Deployment, BuildID: id}
}

// validate refuses names Temporal would refuse later, with a clear message.
func (v Versioning) validate() error {
	if !v.Enabled() {
		if v.BuildID != "" {
			return fmt.Errorf("worker: FASTAGENT_BUILD_ID %q is set without FASTAGENT_DEPLOYMENT: a build ID only means something inside a Worker Deployment", v.BuildID)
		}
		return nil
	}
	ver := v.Version()
	if strings.ContainsAny(ver.DeploymentName, ".:") {
		return fmt.Errorf("worker: FASTAGENT_DEPLOYMENT %q cannot contain '.' or ':'", ver.DeploymentName)
	}
	// A build ID must name one build: pinned runs are replayed by any worker
	// of their version, so two builds sharing one would replay each other's
	// histories (and fail nondeterministically on the first difference).
	switch {
	case ver.BuildID == "unknown":
		return fmt.Errorf("worker: the build ID is %q (this binary carries no version control revision): set FASTAGENT_BUILD_ID to a name unique to this code, such as the release tag or commit, or build from a git checkout", ver.BuildID)
	case strings.HasSuffix(ver.BuildID, "-dirty"):
		return fmt.Errorf("worker: the build ID %q was built with uncommitted changes, so other builds can carry the same ID: commit and rebuild, or set FASTAGENT_BUILD_ID to a name unique to this code", ver.BuildID)
	}
	for _, f := range []struct{ name, val string }{{"FASTAGENT_DEPLOYMENT", ver.DeploymentName}, {"FASTAGENT_BUILD_ID", ver.BuildID}} {
		switch {
		case strings.HasPrefix(f.val, "__"):
			return fmt.Errorf("worker: %s %q cannot start with '__'", f.name, f.val)
		case strings.ContainsAny(f.val, " \t\r\n"):
			return fmt.Errorf("worker: %s %q cannot contain spaces", f.name, f.val)
		case len(f.val) > 255:
			return fmt.Errorf("worker: %s is longer than 255 bytes", f.name)
		}
	}
	return nil
}

// deploymentOptions are the SDK options for v: pinned by default, so that
// no workflow task of a run is ever handed to other code than the run's own.
func (v Versioning) deploymentOptions() sdkworker.DeploymentOptions {
	if !v.Enabled() {
		return sdkworker.DeploymentOptions{}
	}
	return sdkworker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   v.Version(),
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}

// DefaultBuildID names the running binary as `fastagent version` does
// (buildinfo): the -ldflags build ID, else the VCS revision it was built
// from ("-dirty" for modified trees), else "unknown".
func DefaultBuildID() string { return buildinfo.Read().BuildID }
