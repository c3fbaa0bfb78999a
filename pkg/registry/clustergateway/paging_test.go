package clustergateway

import (
	"fmt"
	"testing"
)

func TestPage(t *testing.T) {
	var names []string
	for i := 9; i >= 0; i-- {
		names = append(names, fmt.Sprintf("gw-%d", i))
	}
	id := func(s string) string { return s }

	var got []string
	cont := ""
	pages := 0
	for {
		items, next, remaining, err := page(append([]string{}, names...), id, 4, cont)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, items...)
		if next == "" {
			if remaining != nil {
				t.Fatalf("last page has remainingItemCount %d", *remaining)
			}
			break
		}
		if want := int64(10 - len(got)); remaining == nil || *remaining != want {
			t.Fatalf("remainingItemCount = %v, want %d", remaining, want)
		}
		cont = next
	}
	if pages != 3 || len(got) != 10 || got[0] != "gw-0" || got[9] != "gw-9" {
		t.Fatalf("%d pages, items %v", pages, got)
	}
	if all, next, _, _ := page(append([]string{}, names...), id, 0, ""); len(all) != 10 || next != "" {
		t.Fatalf("no limit: %d items, continue %q", len(all), next)
	}
	if _, _, _, err := page(names, id, 4, "not a token!"); err == nil {
		t.Fatal("a garbage continue token was accepted")
	}
}
