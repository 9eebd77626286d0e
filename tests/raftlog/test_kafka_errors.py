from raftlog.errors import ErrorCode
from raftlog.kafka.errors import FROM_KAFKA, KAFKA, TO_KAFKA, from_kafka, to_kafka


def test_every_raftlog_code_has_a_kafka_code_of_the_same_name():
    assert set(TO_KAFKA) == set(ErrorCode)
    renamed = {"INVALID_TOPIC", "OUT_OF_ORDER_SEQUENCE", "DUPLICATE_SEQUENCE", "UNKNOWN_API"}
    for code in ErrorCode:
        if code.name not in renamed:
            assert TO_KAFKA[code] == KAFKA[code.name]


def test_well_known_kafka_numbers():
    assert to_kafka(ErrorCode.NOT_LEADER_OR_FOLLOWER) == 6
    assert to_kafka(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) == 3
    assert to_kafka(ErrorCode.OUT_OF_ORDER_SEQUENCE) == 45
    assert to_kafka(ErrorCode.UNKNOWN_API) == 35
    assert to_kafka(ErrorCode.UNKNOWN_SERVER_ERROR) == -1
    assert to_kafka(9999) == -1


def test_round_trip_and_no_two_raftlog_codes_share_a_kafka_code():
    for code in ErrorCode:
        if code is not ErrorCode.UNKNOWN_API:
            assert from_kafka(to_kafka(code)) is code
    assert len(FROM_KAFKA) == len(ErrorCode) - 1
    assert from_kafka(12345) is ErrorCode.UNKNOWN_SERVER_ERROR
