package loadgen_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// The IMA/FMA test's WCAT scenario against an NFuse endpoint: enumerations at 10,
// 20, ... 100 concurrent clients, a minute each, the first 10 s of each
// not measured, with users from a file and ctx1 passwords.
func Example_stepped() {
	users, err := loadgen.LoadUsers("users.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	target := &loadgen.NFuse{URL: "http://127.0.0.1:8080/scripts/wpnbr.dll", Users: users}
	exec := loadgen.Stepped{Start: 10, Step: 10, Max: 100, StepDuration: time.Minute, Warmup: 10 * time.Second}
	res, err := exec.Run(context.Background(), target, loadgen.Options{Timeout: 20 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	loadgen.StepsTable("NFuse enumeration", res).WriteMarkdown(os.Stdout)
}

// Citrix's sizing test: users log on and launch at 20 per second whatever
// the broker does; the wait of those that queue counts in their latency.
func Example_rate() {
	users, _ := loadgen.LoadUsers("users.txt")
	target := &loadgen.REST{BaseURL: "http://127.0.0.1:8080", Users: users,
		Flow: []string{loadgen.StepLogin, loadgen.StepLaunch}, Resources: []string{"office-writer-001"}}
	exec := loadgen.Rate{From: 20, To: 20, StepDuration: 5 * time.Minute, Workers: 64, Policy: loadgen.Queue}
	res, err := exec.Run(context.Background(), target, loadgen.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	th, _ := loadgen.ParseThreshold("p99<2s")
	for _, fail := range loadgen.CheckThresholds(res, []loadgen.Threshold{th}) {
		fmt.Println(fail)
	}
}
