package redis

// Which Redis Cluster slot a key belongs to.

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// crcTable is CRC-16/XMODEM (polynomial 0x1021), Redis Cluster's key hash.
var crcTable = func() [256]uint16 {
	var t [256]uint16
	for i := range t {
		crc := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// KeySlot is the cluster slot of key: CRC16 of its hash tag (the bytes
// between the first "{" and the next "}", when not empty) or of the whole
// key, modulo 16384.
func KeySlot(key string) int {
	s := key
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						s = key[i+1 : j]
					}
					break
				}
			}
			break
		}
	}
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return int(crc) & (clusterSlots - 1)
}
