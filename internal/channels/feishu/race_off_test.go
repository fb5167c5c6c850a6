//go:build !race

package feishu_test

// sdkRace: see race_on_test.go.
const sdkRace = false
