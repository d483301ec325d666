package corpcode

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// The name rule tracks exactly the fake universe's construction companies.
func TestTracked_FakeUniverse(t *testing.T) {
	t.Parallel()
	companies := fakeupstream.New(fakeupstream.Config{}).Companies()
	tracked := 0
	for _, c := range companies {
		require.Equal(t, c.Construction, Tracked(c.Name, c.EngName), "%s (%s)", c.Name, c.EngName)
		if c.Construction {
			tracked++
		}
	}
	require.Greater(t, tracked, len(companies)/10)
}

func TestTracked_Names(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, eng string
		want      bool
	}{
		{"현대건설", "HYUNDAI ENGINEERING & CONSTRUCTION", true},
		{"HDC현대산업개발", "HDC HYUNDAI DEVELOPMENT", true},
		{"삼성엔지니어링", "Samsung Engineering", true},
		{"대우건영", "", true},
		{"태영이앤씨", "", true},
		{"부영주택", "", true},
		{"대림산업", "DAELIM E&C", true},
		{"삼성물산", "SAMSUNG C&T CONSTRUCTION", true},
		{"한국주택금융공사", "Korea Housing Finance Corporation", false},
		{"건설공제조합", "Construction Guarantee", false},
		{"주택도시보증공사", "Korea Housing & Urban Guarantee Corporation", false},
		{"삼성전자", "SAMSUNG ELECTRONICS", false},
		{"한일시멘트", "HANIL CEMENT", false},
	} {
		require.Equal(t, tc.want, Tracked(tc.name, tc.eng), tc.name)
	}
}

func TestChunkKey(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	key := chunkKey(sum, 7)
	gotSum, index, err := parseChunkKey(key)
	require.NoError(t, err)
	require.Equal(t, sum, gotSum)
	require.Equal(t, 7, index)
	for _, bad := range []string{"", "abc:1", sum, sum + ":x", sum + ":-1"} {
		_, _, err := parseChunkKey(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "2025-01-31", modifyDate("20250131"))
	require.Equal(t, "", modifyDate("2025013"))
	require.Equal(t, "", modifyDate(""))
}
