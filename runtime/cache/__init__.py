"""The on-disk caches: entries checksummed and written atomically (disk, over the checked file
operations of fs), libraries pinned between verification and loading (pinned), and the
compiler's fingerprint that is part of every key (fingerprint).
"""
