package slack

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/wire"
)

// clickBy is an approval click by user on a button with value.
func clickBy(t *testing.T, user, value string) []byte {
	t.Helper()
	b := clickBody(t, actionApprove, value, "")
	return []byte(strings.Replace(string(b), "%22U1%22", "%22"+user+"%22", 1))
}

// A click on a call that lists slack:admins carries the role when
// users.info says the clicker is an admin or owner of the workspace the
// call was asked in, and not for a plain member, a member of another
// workspace, a bot, a deactivated admin or an unknown user (a failed
// lookup). Answers are kept a minute; a call that does not list the role
// looks no one up.
func TestSlackAdminsClick(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	for _, u := range []fakeslack.User{
		{ID: "UADMIN", TeamID: "T1", Admin: true},
		{ID: "UOWNER", TeamID: "T1", Owner: true},
		{ID: "UPRIMARY", TeamID: "T1", PrimaryOwner: true},
		{ID: "UMEMBER", TeamID: "T1"},
		{ID: "UELSEWHERE", TeamID: "T2", Admin: true},
		{ID: "UBOT", TeamID: "T1", Admin: true, Bot: true},
		{ID: "UGONE", TeamID: "T1", Admin: true, Deleted: true},
	} {
		fake.AddUser(u)
	}
	var mu sync.Mutex
	now := time.Unix(1800000000, 0)
	admins := NewAdmins("xoxb-test", fake.APIURL())
	admins.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	d := &Door{APIURL: fake.APIURL(), Admins: admins}
	value := `{"s":"slack:T1:C1:1.0","c":"call_1","ad":"T1"}`
	role := func(user, value string) string {
		t.Helper()
		p, err := d.Parse(reqOf(clickBy(t, user, value)))
		if err != nil || len(p.Decisions) != 1 || p.Decisions[0].Request.By != "slack:"+user {
			t.Fatalf("click by %s: %+v, %v; want one decision by them", user, p.Decisions, err)
		}
		return p.Decisions[0].Request.Role
	}
	for user, want := range map[string]string{
		"UADMIN": AdminsRole, "UOWNER": AdminsRole, "UPRIMARY": AdminsRole,
		"UMEMBER": "", "UELSEWHERE": "", "UBOT": "", "UGONE": "", "UNKNOWN": "",
	} {
		if got := role(user, value); got != want {
			t.Errorf("click by %s: role %q, want %q", user, got, want)
		}
	}
	lookups := func(user string) int {
		n := 0
		for _, c := range fake.Calls("users.info") {
			if c.Get("user") == user {
				n++
			}
		}
		return n
	}
	role("UADMIN", value)
	if n := lookups("UADMIN"); n != 1 {
		t.Errorf("users.info for UADMIN called %d times within a minute, want 1 (kept)", n)
	}
	if n := lookups("UNKNOWN"); n != 1 {
		t.Errorf("users.info for UNKNOWN called %d times, want 1", n)
	}
	role("UNKNOWN", value)
	if n := lookups("UNKNOWN"); n != 2 {
		t.Errorf("a failed lookup was kept: users.info for UNKNOWN called %d times, want 2", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	role("UADMIN", value)
	if n := lookups("UADMIN"); n != 2 {
		t.Errorf("users.info for UADMIN called %d times after the answer expired, want 2", n)
	}
	before := len(fake.Calls("users.info"))
	if got := role("UADMIN", `{"s":"slack:T1:C1:1.0","c":"call_1"}`); got != "" || len(fake.Calls("users.info")) != before {
		t.Errorf("a call without the role: role %q, %d lookups; want none", got, len(fake.Calls("users.info"))-before)
	}
	nobody := &Door{}
	if p, _ := nobody.Parse(reqOf(clickBy(t, "UADMIN", value))); len(p.Decisions) != 1 || p.Decisions[0].Request.Role != "" {
		t.Errorf("a door without lookups: %+v, want no role", p.Decisions)
	}
}

// The approval message of a call listing slack:admins names them and its
// buttons carry the workspace whose admins may decide.
func TestSlackAdminsAsk(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	r := NewReplier("xoxb-test", fake.APIURL())
	ev := agent.ApprovalRequested("c1", "deploy", json.RawMessage(`{}`), "", "", []string{AdminsRole, "slack:U9"}, time.Time{})
	if _, err := r.Ask(context.Background(), wire.Target{Chat: "T1:C1", Thread: "1.0"}, "slack:T1:C1:1.0", ev); err != nil {
		t.Fatal(err)
	}
	posts := fake.Calls("chat.postMessage")
	if len(posts) != 1 || !strings.Contains(posts[0].Get("text"), "Who may decide: the workspace's admins and owners, slack:U9.") ||
		!strings.Contains(posts[0].Get("blocks"), `\"ad\":\"T1\"`) {
		t.Errorf("posted %+v, want the admins named and the workspace in the buttons", posts)
	}
}
