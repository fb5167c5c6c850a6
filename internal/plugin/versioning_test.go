package plugin

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/workflow"
)

func TestVersioningFromEnv(t *testing.T) {
	env := map[string]string{"FASTAGENT_DEPLOYMENT": " fastagent-prod ", "FASTAGENT_BUILD_ID": "v1.4.0"}
	v := VersioningFromEnv(func(k string) string { return env[k] })
	if v.Deployment != "fastagent-prod" || v.BuildID != "v1.4.0" || !v.Enabled() {
		t.Fatalf("%+v", v)
	}
	if v := VersioningFromEnv(func(string) string { return "" }); v.Enabled() {
		t.Fatalf("no FASTAGENT_DEPLOYMENT must stay unversioned: %+v", v)
	}
}

func TestVersioningOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       Versioning
		wantErr string
		want    string // deployment:build, "" = unversioned
	}{
		{name: "off", v: Versioning{}},
		{name: "explicit build", v: Versioning{Deployment: "fa", BuildID: "b-1.2"}, want: "fa:b-1.2"},
		{name: "default build (a clean VCS revision)", v: Versioning{Deployment: "fa", defaultID: "0123abc"}, want: "fa:0123abc"},
		// Two different builds would share these names and replay each
		// other's histories: refused, with what to set instead.
		{name: "default build unknown", v: Versioning{Deployment: "fa", defaultID: "unknown"}, wantErr: "set FASTAGENT_BUILD_ID"},
		{name: "default build dirty", v: Versioning{Deployment: "fa", defaultID: "0123abc-dirty"}, wantErr: "uncommitted changes"},
		{name: "explicit unknown", v: Versioning{Deployment: "fa", BuildID: "unknown"}, wantErr: "set FASTAGENT_BUILD_ID"},
		{name: "explicit dirty", v: Versioning{Deployment: "fa", BuildID: "0123abc-dirty"}, wantErr: "uncommitted changes"},
		{name: "build without deployment", v: Versioning{BuildID: "x"}, wantErr: "without FASTAGENT_DEPLOYMENT"},
		{name: "dot in deployment", v: Versioning{Deployment: "fa.prod", BuildID: "x"}, wantErr: "cannot contain"},
		{name: "colon in deployment", v: Versioning{Deployment: "fa:prod", BuildID: "x"}, wantErr: "cannot contain"},
		{name: "reserved prefix", v: Versioning{Deployment: "fa", BuildID: "__unversioned__"}, wantErr: "cannot start with '__'"},
		{name: "space", v: Versioning{Deployment: "fa", BuildID: "a b"}, wantErr: "cannot contain spaces"},
		{name: "too long", v: Versioning{Deployment: "fa", BuildID: strings.Repeat("x", 256)}, wantErr: "longer than 255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o := tc.v.deploymentOptions()
			if tc.want == "" {
				if o.UseVersioning {
					t.Fatalf("unversioned worker got %+v", o)
				}
				return
			}
			got := o.Version.DeploymentName + ":" + o.Version.BuildID
			if !o.UseVersioning || got != tc.want || o.DefaultVersioningBehavior != workflow.VersioningBehaviorPinned {
				t.Fatalf("options = %+v, want %s pinned", o, tc.want)
			}
		})
	}
}

// A bad deployment name is refused before any worker is built.
func TestNewRefusesBadVersioning(t *testing.T) {
	_, err := Tuning{Versioning: Versioning{Deployment: "a.b"}}.WorkerOptions()
	if err == nil || !strings.Contains(err.Error(), "FASTAGENT_DEPLOYMENT") {
		t.Fatalf("err = %v", err)
	}
}
