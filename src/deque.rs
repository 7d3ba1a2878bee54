//! Searches and removals on sorted [`VecDeque`]s whose elements come and go mostly at the ends:
//! the engine's windows (sequence numbers, event times) and the Kafka offset book (offsets).

use std::collections::VecDeque;

/// [`VecDeque::binary_search_by_key`] on a deque sorted by `key_of`, answering a key at or
/// beyond either end without the search: offsets, window sequence numbers and event times
/// mostly come and go at the ends, and the search's cache misses were a tenth of the poll
/// thread in `bench kafka`.
pub fn search_from_ends<T, K: Ord>(
    deque: &VecDeque<T>,
    key: &K,
    key_of: impl Fn(&T) -> K,
) -> Result<usize, usize> {
    let (Some(front), Some(back)) = (deque.front(), deque.back()) else {
        return Err(0);
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (key.cmp(&key_of(front)), key.cmp(&key_of(back))) {
        (Less, _) => Err(0),
        (Equal, _) => Ok(0),
        (_, Greater) => Err(deque.len()),
        (_, Equal) => Ok(deque.len() - 1),
        (Greater, Less) => deque.binary_search_by_key(key, key_of),
    }
}

/// [`VecDeque::remove`], taking the front by `pop_front`: the ends are where these deques
/// lose elements, and `remove(0)` goes through a general shift (measured on the Kafka poll
/// thread).
pub fn remove_at<T>(deque: &mut VecDeque<T>, at: usize) -> Option<T> {
    if at == 0 {
        deque.pop_front()
    } else {
        deque.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// On distinct sorted keys, the same answer as a plain binary search, for keys inside,
        /// at and beyond both ends.
        #[test]
        fn search_from_ends_is_a_binary_search(
            keys in proptest::collection::btree_set(0i64..60, 0..20),
            key in -2i64..62,
        ) {
            let deque: VecDeque<(i64, u32)> = keys.into_iter().map(|k| (k, 1)).collect();
            proptest::prop_assert_eq!(
                search_from_ends(&deque, &key, |(k, _)| *k),
                deque.binary_search_by_key(&key, |(k, _)| *k)
            );
        }
    }

    #[test]
    fn remove_at_takes_the_front_and_the_middle() {
        let mut deque: VecDeque<i32> = (0..5).collect();
        assert_eq!(remove_at(&mut deque, 0), Some(0));
        assert_eq!(remove_at(&mut deque, 2), Some(3));
        assert_eq!(remove_at(&mut deque, 9), None);
        assert_eq!(deque, [1, 2, 4]);
    }
}
