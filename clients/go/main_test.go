package slidingwindow_test

import (
	"os"
	"testing"

	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

func TestMain(m *testing.M) { os.Exit(testredis.Main(m)) }
