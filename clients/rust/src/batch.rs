//! Several calls in one round trip: a pipeline, or a transaction (MULTI/EXEC) that runs them
//! together. In a cluster the batch goes to the node of its first call's slot, so every key in it
//! must share that slot (one hash tag).

use crate::error::{Error, line};
use crate::reply::{Reply, Shape, removed};
use crate::request::{Call, Refund};
use redis::cluster_routing::Route;
use redis::{Pipeline, Value};

/// What one call of a batch answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Reply(Reply),
    /// REFUND: how many requests were taken back.
    Removed(u64),
}

impl Answer {
    /// The reply of a check; an error for a refund's answer.
    pub fn reply(self) -> Result<Reply, Error> {
        match self {
            Answer::Reply(r) => Ok(r),
            Answer::Removed(n) => Err(Error::Reply(format!("a refund's count ({n})"))),
        }
    }

    /// The count of a refund; an error for a check's reply.
    pub fn removed(self) -> Result<u64, Error> {
        match self {
            Answer::Removed(n) => Ok(n),
            Answer::Reply(r) => Err(Error::Reply(format!("a check's reply ({r:?})"))),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Expect {
    Reply(Shape),
    Removed,
}

#[derive(Debug, Clone)]
pub struct Batch {
    pipe: Pipeline,
    expect: Vec<Expect>,
    route: Option<Route>,
}

impl Batch {
    /// Sent together, run one after the other, each on its own.
    pub fn pipeline() -> Batch {
        Batch {
            pipe: redis::pipe(),
            expect: Vec::new(),
            route: None,
        }
    }

    /// MULTI/EXEC: run together, nothing else in between.
    pub fn transaction() -> Batch {
        let mut b = Batch::pipeline();
        b.pipe.atomic();
        b
    }

    /// Adds a check; its answer is an [`Answer::Reply`].
    pub fn call(&mut self, call: Call) -> &mut Batch {
        self.route.get_or_insert(call.route());
        self.expect.push(Expect::Reply(call.shape()));
        self.pipe.add_command(call.into_cmd());
        self
    }

    /// Adds a refund; its answer is an [`Answer::Removed`].
    pub fn refund(&mut self, r: &Refund<'_>) -> Result<&mut Batch, Error> {
        let (cmd, route) = r.command()?;
        self.route.get_or_insert(route);
        self.expect.push(Expect::Removed);
        self.pipe.add_command(cmd);
        Ok(self)
    }

    pub fn len(&self) -> usize {
        self.expect.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expect.is_empty()
    }

    pub(crate) fn pipe(&self) -> &Pipeline {
        &self.pipe
    }

    /// Where it goes in a cluster: the first call's slot; None when empty.
    pub(crate) fn route(&self) -> Option<Route> {
        self.route
    }

    pub(crate) fn answers(&self, values: Vec<Value>) -> Result<Vec<Result<Answer, Error>>, Error> {
        let values = if self.pipe.is_transaction() {
            match values.into_iter().next_back() {
                Some(Value::Array(items)) => items,
                Some(Value::ServerError(e)) => {
                    return Err(Error::Server(line(e.code(), e.details())));
                }
                other => return Err(Error::Reply(format!("EXEC answered {other:?}"))),
            }
        } else {
            values
        };
        if values.len() != self.expect.len() {
            return Err(Error::Reply(format!(
                "{} replies to {} calls",
                values.len(),
                self.expect.len()
            )));
        }
        Ok(self
            .expect
            .iter()
            .zip(&values)
            .map(|(e, v)| match e {
                Expect::Reply(shape) => shape.parse(v).map(Answer::Reply),
                Expect::Removed => removed(v).map(Answer::Removed),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Limit;
    use crate::request::Check;

    fn two_calls(transaction: bool) -> Batch {
        let mut b = if transaction {
            Batch::transaction()
        } else {
            Batch::pipeline()
        };
        let limits = [Limit::new(1, 1).unwrap()];
        b.call(Call::allow(&Check::new(b"k", &limits)).unwrap());
        b.refund(&Refund::new(b"k", 1)).unwrap();
        b
    }

    #[test]
    fn an_empty_batch_goes_nowhere() {
        assert_eq!(Batch::transaction().route(), None);
    }

    #[test]
    fn answers_in_order_and_what_a_transaction_can_end_with() {
        let allow = Value::Array([1, 1, 0, 1000, 1000].map(Value::Int).to_vec());
        let answers = two_calls(false)
            .answers(vec![allow.clone(), Value::Int(1)])
            .unwrap();
        assert!(matches!(&answers[0], Ok(Answer::Reply(r)) if r.allowed));
        assert_eq!(answers[1].clone().unwrap().removed().unwrap(), 1);
        assert!(answers[0].clone().unwrap().removed().is_err());
        let exec = two_calls(true)
            .answers(vec![Value::Array(vec![allow, Value::Int(0)])])
            .unwrap();
        assert_eq!(exec.len(), 2);
        let aborted = redis::parse_redis_value(b"-EXECABORT Transaction discarded\r\n").unwrap();
        match two_calls(true).answers(vec![aborted]) {
            Err(Error::Server(t)) => assert_eq!(t, "EXECABORT Transaction discarded"),
            other => panic!("{other:?}"),
        }
        for bad in [vec![Value::Nil], vec![Value::Array(vec![Value::Int(1)])]] {
            assert!(matches!(two_calls(true).answers(bad), Err(Error::Reply(_))));
        }
        assert!(matches!(
            two_calls(false).answers(vec![Value::Int(1)]),
            Err(Error::Reply(_))
        ));
    }
}
