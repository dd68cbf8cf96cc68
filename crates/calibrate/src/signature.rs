//! Partition-table and filesystem signatures: how a calibration target that holds data is told
//! by its first bytes. Both kinds of target that can hold data read them: a block device
//! ([`crate::target`], through an exclusive open) and an NBD export ([`crate::nbd`], over the
//! connection), and refuse the target by the signature's name unless `--destructive`.
//!
//! What it leaves out: signatures beyond the table ([`SIGNATURES`]; `blkid` knows hundreds).

/// Bytes read from the start of a target to look for signatures (ISO 9660's at 32,769 is the
/// deepest in the table, btrfs's at 65,600 the last).
pub const HEAD_BYTES: usize = 70_000;

/// Partition-table and filesystem signatures: (name, byte offset, magic).
pub const SIGNATURES: &[(&str, usize, &[u8])] = &[
    ("GPT partition table", 512, b"EFI PART"),
    ("LVM physical volume", 536, b"LVM2 001"),
    ("LUKS", 0, b"LUKS\xba\xbe"),
    ("XFS", 0, b"XFSB"),
    ("ext2/3/4", 1080, &[0x53, 0xef]),
    ("btrfs", 65_600, b"_BHRfS_M"),
    ("swap", 4086, b"SWAPSPACE2"),
    ("NTFS", 3, b"NTFS    "),
    ("FAT", 82, b"FAT32   "),
    ("FAT", 54, b"FAT1"),
    ("ISO 9660", 32_769, b"CD001"),
    ("MBR partition table", 510, &[0x55, 0xaa]),
];

/// The first signature found in `head` (the target's first bytes), by name.
pub fn signature(head: &[u8]) -> Option<&'static str> {
    SIGNATURES.iter().find_map(|&(name, off, magic)| {
        (head.len() >= off + magic.len() && &head[off..off + magic.len()] == magic).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_named() {
        let mut head = vec![0u8; HEAD_BYTES];
        assert_eq!(signature(&head), None);
        head[510] = 0x55;
        head[511] = 0xaa;
        assert_eq!(signature(&head), Some("MBR partition table"));
        head[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(signature(&head), Some("GPT partition table"));
        let mut ext = vec![0u8; 4096];
        ext[1080] = 0x53;
        ext[1081] = 0xef;
        assert_eq!(signature(&ext), Some("ext2/3/4"));
    }
}
