-- Channels a user turned off (`toki_core::User::channels_off`), comma
-- separated (`slack,mail`); empty: every channel on.
ALTER TABLE users ADD COLUMN channels_off TEXT NOT NULL DEFAULT '';
