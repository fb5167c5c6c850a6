package workflows_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

var updateShapes = flag.Bool("update-shapes", false, "rewrite testdata/wireshapes from the current types")

// wireTypes are every payload the workflows exchange with callers, with
// their activities and with themselves (continue-as-new), by the name of
// their golden file: the types of the caller contract (workflows), of the
// protocol with the activities and doors (internal/wire, which copies
// Delivery and ReplyTarget) and of the workflows' own state (unexported,
// named for these tests in export_test.go). FailedReply is the entry the
// session keeps; FailedReply.view what its state query shows.
var wireTypes = map[string][]any{
	"AbortRequest":     {workflows.AbortRequest{}},
	"AbortResult":      {workflows.AbortResult{}},
	"AnswerRequest":    {workflows.AnswerRequest{}},
	"ApproveRequest":   {workflows.ApproveRequest{}},
	"Attachment":       {wire.Attachment{}},
	"BeginTurnInput":   {wire.BeginTurnInput{}},
	"BeginTurnResult":  {wire.BeginTurnResult{}},
	"BufferedLine":     {workflows.BufferedLine{}},
	"CarriedRefusal":   {workflows.CarriedRefusal{}},
	"ChatBuffer":       {workflows.ChatBuffer{}},
	"ChatInput":        {workflows.ChatInput{}},
	"ChatMessage":      {wire.ChatMessage{}},
	"ChatPolicy":       {wire.ChatPolicy{}},
	"ChatRoute":        {workflows.ChatRoute{}},
	"ChatState":        {workflows.ChatState{}},
	"CommandInput":     {wire.CommandInput{}},
	"CompactInput":     {wire.CompactInput{}},
	"CompactRequest":   {workflows.CompactRequest{}},
	"CompactResult":    {workflows.CompactResult{}},
	"DayUsage":         {workflows.DayUsage{}},
	"DelegateInput":    {workflows.DelegateInput{}},
	"Delivery":         {workflows.Delivery{}, wire.Delivery{}},
	"DropInput":        {wire.DropInput{}},
	"FailedReply":      {workflows.FailedReplyEntry{}},
	"FailedReply.view": {workflows.FailedReply{}},
	"FetchInput":       {wire.FetchInput{}},
	"FireInput":        {workflows.FireInput{}},
	"FireRecord":       {workflows.FireRecord{}},
	"FireRequest":      {wire.FireRequest{}},
	"NextWakeInput":    {wire.NextWakeInput{}},
	"OpenInput":        {wire.OpenInput{}},
	"OpenResult":       {wire.OpenResult{}},
	"PendingApproval":  {workflows.PendingApproval{}},
	"PendingQuestion":  {workflows.PendingQuestion{}},
	"PublishInput":     {wire.PublishInput{}},
	"QueuedTurn":       {workflows.QueuedTurn{}},
	"RecentTurn":       {workflows.RecentTurn{}},
	"RecordTurnInput":  {wire.RecordTurnInput{}},
	"ReplyInput":       {wire.ReplyInput{}},
	"ReplyTarget":      {workflows.ReplyTarget{}, wire.ReplyTarget{}},
	"ResendRequest":    {workflows.ResendRequest{}},
	"RewindInput":      {wire.RewindInput{}},
	"RewindRequest":    {workflows.RewindRequest{}},
	"RewindResult":     {workflows.RewindResult{}},
	"RouteInput":       {wire.RouteInput{}},
	"SendInput":        {wire.SendInput{}},
	"SendResult":       {wire.SendResult{}},
	"SessionInput":     {workflows.SessionInput{}},
	"SessionView":      {workflows.SessionView{}},
	"Snapshot":         {workflows.Snapshot{}},
	"SteerRequest":     {workflows.SteerRequest{}},
	"StopInput":        {wire.StopInput{}},
	"StreamInput":      {wire.StreamInput{}},
	"SubAgentDecision": {workflows.SubAgentDecision{}},
	"SubAgentRefusal":  {workflows.SubAgentRefusal{}},
	"SubAgentWait":     {workflows.SubAgentWait{}},
	"Target":           {wire.Target{}},
	"TurnDone":         {workflows.TurnDone{}},
	"TurnRequest":      {workflows.TurnRequest{}},
	"TurnStopInput":    {wire.TurnStopInput{}},
	"WakeRecord":       {workflows.WakeRecord{}},
}

// Every payload type encodes, with every field set, to the JSON recorded in
// testdata/wireshapes: moving a type between packages, or renaming it,
// changes nothing a running session, a recorded history or a caller reads.
// (The goldens were written by the types as they were before any of them
// moved; `go test -run TestWireShapes -update-shapes` rewrites them, which
// is only right for a deliberate, versioned change of a payload.)
func TestWireShapes(t *testing.T) {
	t.Parallel()
	for name, types := range wireTypes {
		for _, zero := range types {
			checkShape(t, name, zero)
		}
	}
}

func checkShape(t *testing.T, name string, zero any) {
	t.Helper()
	{
		v := reflect.New(reflect.TypeOf(zero)).Elem()
		fill(v, 0)
		got, err := json.MarshalIndent(v.Interface(), "", "  ")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got = append(got, '\n')
		file := filepath.Join("testdata", "wireshapes", name+".json")
		if *updateShapes {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, got, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (a new payload type? record it with -update-shapes)", name, err)
			return
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s (%T) encodes differently from %s:\n%s\nwant:\n%s", name, zero, file, got, want)
		}
		// And what was recorded decodes into the type with no field left
		// over, to the same value.
		back := reflect.New(reflect.TypeOf(zero))
		dec := json.NewDecoder(bytes.NewReader(want))
		dec.DisallowUnknownFields()
		if err := dec.Decode(back.Interface()); err != nil {
			t.Errorf("%s (%T): %s does not decode: %v", name, zero, file, err)
			return
		}
		again, _ := json.MarshalIndent(back.Elem().Interface(), "", "  ")
		if !bytes.Equal(append(again, '\n'), want) {
			t.Errorf("%s: %s does not survive a decode and encode:\n%s", name, file, again)
		}
	}
}

var shapeTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// fill sets every exported field of v to a value that is not its zero
// value and depends only on the field's name and type: a string field
// holds its own name.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch {
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(shapeTime))
		return
	case v.Type() == reflect.TypeOf(json.RawMessage{}):
		v.SetBytes([]byte(`{"raw":true}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Type.Kind() == reflect.String {
				v.Field(i).SetString(f.Name)
				continue
			}
			fill(v.Field(i), depth+1)
		}
	}
}
