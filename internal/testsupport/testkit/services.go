package testkit

import (
	"os"
	"testing"
)

// RequireServicesEnv names the variable that turns an unreachable service
// into a test failure instead of a skip; .ci/run sets it to 1.
const RequireServicesEnv = "FASTAGENT_REQUIRE_SERVICES"

// servicesRequired reports whether a test needing a service must fail rather
// than skip when it is unreachable: FASTAGENT_REQUIRE_SERVICES=1, or CI=true
// (kept for runners that set only that).
func servicesRequired(getenv func(string) string) bool {
	return getenv(RequireServicesEnv) == "1" || getenv("CI") == "true"
}

// startHints says how to bring up the services tests use.
var startHints = map[string]string{
	"postgres": "start it with `docker compose up -d postgres` or point FASTAGENT_TEST_POSTGRES at one",
	"nats":     "start it with `nats-server -js` (or `docker compose up -d nats`) or point FASTAGENT_TEST_NATS_URL at one",
}

// RequireService is called by a test that needs the service name at addr,
// with err the result of reaching it. A nil err returns. Otherwise the test
// fails when FASTAGENT_REQUIRE_SERVICES=1 (or CI=true), and is skipped, with
// the reason and how to start the service, when neither is set.
func RequireService(tb testing.TB, name, addr string, err error) {
	tb.Helper()
	requireService(tb, os.Getenv, name, addr, err)
}

func requireService(tb testing.TB, getenv func(string) string, name, addr string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	hint := startHints[name]
	if hint == "" {
		hint = "start it"
	}
	if servicesRequired(getenv) {
		tb.Fatalf("%s at %s is unreachable and %s=1 (or CI=true) requires it, so this fails instead of skipping: %v; %s",
			name, addr, RequireServicesEnv, err, hint)
	}
	tb.Skipf("skipping: %s at %s is unreachable: %v; %s (set %s=1 to make this a failure)",
		name, addr, err, hint, RequireServicesEnv)
}
