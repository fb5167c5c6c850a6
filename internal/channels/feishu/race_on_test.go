//go:build race

package feishu_test

// sdkRace is set under the race detector: the SDK's larkws client races on
// its own fields (conn and config read by pingLoop and receiveMessageLoop
// without its lock, ws/client.go v3.4.22), so tests that run it are
// skipped there.
const sdkRace = true
