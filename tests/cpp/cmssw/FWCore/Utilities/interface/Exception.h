// Test double of CMSSW's cms::Exception for tfaot-dist's tests: an exception
// with a category that collects its message with operator<<. Only what the
// TensorFlowAOT contract uses; written for these tests, not taken from CMSSW.
#ifndef TFAOT_TEST_DOUBLE_CMS_EXCEPTION_H
#define TFAOT_TEST_DOUBLE_CMS_EXCEPTION_H

#include <exception>
#include <sstream>
#include <string>

namespace cms {

class Exception : public std::exception {
 public:
  explicit Exception(const std::string& category) : category_(category), text_("[" + category + "] ") {}

  template <typename T>
  Exception& operator<<(const T& value) {
    std::ostringstream out;
    out << value;
    text_ += out.str();
    return *this;
  }

  const std::string& category() const { return category_; }
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  std::string category_;
  std::string text_;
};

}  // namespace cms

#endif
