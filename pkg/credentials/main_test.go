package credentials

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunLauncherIfAsked() // providers run through this binary, as through the gateway's
	goleak.VerifyTestMain(m)
}
