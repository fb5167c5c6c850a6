package main

import (
	"strings"
	"testing"
)

// A password or token given as a flag would sit in /proc/<pid>/cmdline,
// which every process of the machine can read — a tool's too, in Landlock
// mode. The serving commands refuse it before starting anything and say
// which variable to use instead; the same values from the environment, and
// flags without a secret, are accepted.
func TestSecretFlagsRefused(t *testing.T) {
	dir := initWorkspace(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"worker", "--store", "postgres://fastagent:pw-2b7c@127.0.0.1:1/fastagent"}, "FASTAGENT_STORE"},
		{[]string{"worker", "--store", "host=127.0.0.1 port=1 user=fastagent password=pw-2b7c"}, "FASTAGENT_STORE"},
		{[]string{"worker", "--store", "postgres://127.0.0.1:1/fastagent?password=pw-2b7c"}, "FASTAGENT_STORE"},
		{[]string{"ingress", "--feed", "nats://pw-2b7c@127.0.0.1:1"}, "FASTAGENT_FEED"},
		{[]string{"start", "--feed", "nats://u:pw-2b7c@127.0.0.1:1"}, "FASTAGENT_FEED"},
		{[]string{"dev", "--store", "postgres://fastagent:pw-2b7c@127.0.0.1:1/fastagent"}, "FASTAGENT_STORE"},
	}
	for _, c := range cases {
		_, errOut, code := execute(t, "", append([]string{"-C", dir}, c.args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage):\n%s", c.args, code, exitUsage, errOut)
		}
		for _, want := range []string{c.want, "command line"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: the error does not say %q:\n%s", c.args, want, errOut)
			}
		}
		if strings.Contains(errOut, "pw-2b7c") {
			t.Errorf("%v: the error repeats the secret:\n%s", c.args, errOut)
		}
	}
}

func TestSecretInDSN(t *testing.T) {
	for dsn, want := range map[string]bool{
		"":                                       false,
		"/var/lib/fastagent/sessions.db":         false,
		"sqlite:///abs/path.db":                  false,
		"postgres://fastagent@db:5432/fastagent": false,
		"postgres://fastagent:pw@db/fastagent":   true,
		"postgresql://db/fastagent?sslmode=require&password=pw": true,
		"host=db user=fastagent password=pw":                    true,
		"host=db user=fastagent passfile=/run/secrets/pgpass":   false,
		"inprocess":                           false,
		"nats://nats:4222":                    false,
		"nats://token@nats:4222":              true,
		"nats://a:4222,nats://user:pw@b:4222": true,
		"tls://nats.example.com:4222":         false,
	} {
		if got := secretInURL(dsn); got != want {
			t.Errorf("secretInURL(%q) = %v, want %v", dsn, got, want)
		}
	}
}
