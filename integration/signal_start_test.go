package integration

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSignalWhileWaitingForStoreExits0 (issue 55 item 15): SIGINT while a
// command waits for the store at start (here an endpoint that accepts
// connections and never answers) is a clean stop, exit 0, as the help
// says, for lakefs-mount, status and gc. Before, each exited 1 with
// "context canceled".
func TestSignalWhileWaitingForStoreExits0(t *testing.T) {
	mntRequireFUSE(t)
	produce, _ := prdBins(t)
	mountBin := mntBuildMount(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never answered; closed with the listener's test
		}
	}()
	url := "s3://bkt/s?endpoint=http://" + ln.Addr().String() + "&region=us-east-1"
	for name, args := range map[string][]string{
		"lakefs-mount": {mountBin, "--store", url, t.TempDir()},
		"status":       {produce, "status", "--store", url},
		"gc":           {produce, "gc", "--store", url},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s")
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // waiting for the store's first answer
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s after SIGINT while waiting for the store: %v, output %q; want exit 0", name, err, out.String())
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("%s did not stop on SIGINT:\n%s", name, out.String())
			}
		})
	}
}
